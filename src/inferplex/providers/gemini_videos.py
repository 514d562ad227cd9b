"""Veo video jobs on the Gemini adapter (`families/videos.VideoAdapter`): submit with `predictLongRunning`,
poll the operation, download the finished video through the Files API with the deployment's key.

A mixin of `providers/gemini.Gemini` (it uses that class's base URL, headers, session and `ERRORS`);
translation lives in `translate/gemini_videos.py`. The Gemini API offers no way to cancel these operations,
so `video_cancel` reports False and the gateway cancels the job on its side only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp

from inferplex.config import ProviderConfig
from inferplex.errors import NotFound
from inferplex.families.videos import JobStatus, UpstreamJob, VideoRequest
from inferplex.gateway_request import GatewayRequest
from inferplex.providers import http, video_jobs
from inferplex.providers.base import CallInfo
from inferplex.providers.failures import ErrorMap
from inferplex.targets import Target
from inferplex.translate import gemini_videos as tr


class GeminiVideos:
    config: ProviderConfig
    errors: ErrorMap
    _base: str
    _headers: dict[str, str]
    _session: aiohttp.ClientSession

    async def video_submit(self, request: GatewayRequest[VideoRequest], target: Target, info: CallInfo) -> UpstreamJob:
        image = await video_jobs.reference_image(request.body)
        body = tr.build_request(request.body, None if image is None else (image.mime, image.b64))
        url = f"{self._base}/models/{quote(target.upstream_model, safe='')}:predictLongRunning"
        data, _ = await http.post_json_within(
            target, info.timeouts, self._session, url, body, self._headers, self.errors
        )
        try:
            name = tr.operation_name(data)
        except ValueError as exc:
            raise self.errors.malformed(f"answered predictLongRunning without an operation: {exc}") from exc
        return UpstreamJob(name, {"seconds": int(request.body.seconds), "size": request.body.size})

    async def _operation(self, job: UpstreamJob, target: Target, info: CallInfo) -> dict[str, Any]:
        url = f"{self._base}/{quote(job.upstream_id, safe='/')}"
        return await video_jobs.get_object(
            target, info.timeouts, self._session, "GET", url, self._headers, self.errors, "an operation"
        )

    async def video_status(self, job: UpstreamJob, target: Target, info: CallInfo) -> JobStatus:
        operation = await self._operation(job, target, info)
        return video_jobs.parsed(self.errors, tr.status, operation, job.state.get("seconds"), job.state.get("size"))

    async def video_content(
        self, job: UpstreamJob, variant: str, target: Target, info: CallInfo
    ) -> AsyncIterator[bytes]:
        video_jobs.only_video(variant, self.config.name)
        operation = await self._operation(job, target, info)
        uris = [u for u in map(tr.video_uri, tr.samples(operation)) if u]
        if not operation.get("done") or not uris:
            raise NotFound("the video is not ready", code="not_found")
        name = video_jobs.parsed(self.errors, tr.file_name, uris[0])
        url = f"{self._base}/files/{name}:download?alt=media"
        headers = {k: v for k, v in self._headers.items() if k not in ("content-type", "accept")}
        async for piece in video_jobs.download(target, info.timeouts, self._session, url, headers, self.errors):
            yield piece

    async def video_cancel(self, job: UpstreamJob, target: Target, info: CallInfo) -> bool:
        """The Gemini API has no cancel for Veo's operations (google-genai has none either)."""
        return False
