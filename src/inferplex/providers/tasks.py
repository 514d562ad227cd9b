"""The `replicate` provider kind: an asynchronous task API (Replicate's predictions), serving video jobs.

Submit a prediction, poll it, fetch its output, cancel it: the shape every task API of its kind has (Novita's
async tasks, fal's queue). Replicate was chosen as the one to speak because its API is the most complete of
them (a documented cancel, progress in the logs, an official client to check the wire against:
replicate-python), where Novita's task API has no cancel. Translation lives in `translate/tasks_videos.py`.

`base_url` defaults to https://api.replicate.com/v1; `api_key` is sent as `Authorization: Bearer`. A
deployment's `model` is `owner/name` (the model's latest version), `owner/name:<version>`, or a version id.
An output URL is fetched server-side; the key goes with it only to the API's own host (Replicate's delivery
links need none), and the caller never sees the link. Video only: this kind does not chat.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp
from yarl import URL

from inferplex.config import ConfigError, ProviderConfig
from inferplex.errors import NotFound, Unavailable
from inferplex.families.videos import JobStatus, UpstreamJob, VideoRequest
from inferplex.gateway_request import GatewayRequest
from inferplex.providers import video_jobs
from inferplex.providers.base import CallInfo
from inferplex.providers.failures import ErrorMap
from inferplex.targets import Target
from inferplex.translate import tasks_videos as tr

DEFAULT_BASE_URL = "https://api.replicate.com/v1"

# Replicate answers with problem details (`{"title", "detail", "status"}`): its statuses say what happened.
ERRORS = ErrorMap(overloaded_statuses=frozenset({502, 503}))


class Replicate:
    def __init__(self, config: ProviderConfig, session: aiohttp.ClientSession) -> None:
        if config.api_key is None:
            raise ConfigError(f"provider {config.name}: kind replicate needs an api_key")
        self.config = config
        self.errors = ERRORS.bind(config.name)
        self._base = (config.base_url or DEFAULT_BASE_URL).rstrip("/")
        self._headers = {
            "authorization": "Bearer " + config.api_key.get_secret_value(),
            "content-type": "application/json",
            "accept": "application/json",
            **config.headers,
        }
        self._session = session

    async def video_submit(self, request: GatewayRequest[VideoRequest], target: Target, info: CallInfo) -> UpstreamJob:
        image = await video_jobs.reference_image(request.body, links=True)
        link = None if image is None else image.url or f"data:{image.mime};base64,{image.b64}"
        try:
            path, _ = tr.endpoint(target.upstream_model)
        except ValueError as exc:
            raise Unavailable(f"provider {self.config.name} cannot run deployment {target.key}: {exc}") from exc
        body = tr.build_request(request.body, target.upstream_model, link)
        data = await video_jobs.request_json(
            target, info.timeouts, self._session, "POST", self._base + path, self._headers, self.errors, body
        )
        prediction_id = data.get("id") if isinstance(data, dict) else None
        if not isinstance(prediction_id, str) or not prediction_id:
            raise self.errors.malformed("created a prediction without an id")
        return UpstreamJob(prediction_id, {"seconds": int(request.body.seconds), "size": request.body.size})

    async def _prediction(self, job: UpstreamJob, target: Target, info: CallInfo, action: str = "") -> dict[str, Any]:
        url = f"{self._base}/predictions/{quote(job.upstream_id, safe='')}{action}"
        method = "POST" if action else "GET"
        return await video_jobs.get_object(
            target, info.timeouts, self._session, method, url, self._headers, self.errors, "a prediction"
        )

    async def video_status(self, job: UpstreamJob, target: Target, info: CallInfo) -> JobStatus:
        prediction = await self._prediction(job, target, info)
        return video_jobs.parsed(self.errors, tr.status, prediction, job.state.get("seconds"), job.state.get("size"))

    async def video_content(
        self, job: UpstreamJob, variant: str, target: Target, info: CallInfo
    ) -> AsyncIterator[bytes]:
        video_jobs.only_video(variant, self.config.name)
        prediction = await self._prediction(job, target, info)
        url = tr.output_url(prediction) if prediction.get("status") == "succeeded" else None
        if url is None:
            raise NotFound("the video is not ready", code="not_found")
        own = URL(url).origin() == URL(self._base).origin()
        headers = {"authorization": self._headers["authorization"]} if own else {}
        async for piece in video_jobs.download(target, info.timeouts, self._session, url, headers, self.errors):
            yield piece

    async def video_cancel(self, job: UpstreamJob, target: Target, info: CallInfo) -> bool:
        """`POST /predictions/<id>/cancel`: True when the prediction is now canceled (not when it had already
        finished)."""
        prediction = await self._prediction(job, target, info, "/cancel")
        return prediction.get("status") == "canceled"

    async def aclose(self) -> None:
        """The HTTP session is shared and closed by the app."""


def create(config: ProviderConfig, resources: Any) -> Replicate:
    return Replicate(config, resources.http)
