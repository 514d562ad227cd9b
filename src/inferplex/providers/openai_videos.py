"""OpenAI's video jobs (Sora) on the OpenAI-compatible adapter: `families.videos.VideoAdapter` and its remix.

The wire is OpenAI's `/v1/videos` (openai/openai-openapi): `POST {base}/videos` (JSON, or multipart when an
`input_reference` file was uploaded), `GET {base}/videos/{id}`, `GET {base}/videos/{id}/content?variant=`,
`DELETE {base}/videos/{id}` and `POST {base}/videos/{id}/remix`. Each call carries the configured provider's
own key: the poller hands back the target the job was sent to, so a job's status and content calls reach the
deployment that took it with that deployment's key (a caller's own key, Unify's `use_custom_keys`, is not
used for a job: it is not kept, and the job's later calls could not present it). Calls the router does not
make are bounded as it bounds an attempt (`http.bounded`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import aiohttp
import orjson

from inferplex.config import Timeouts
from inferplex.errors import NotFound
from inferplex.families.videos import JobStatus, UpstreamJob, VideoRequest
from inferplex.gateway_request import GatewayRequest
from inferplex.providers import http
from inferplex.providers.base import CallInfo
from inferplex.providers.openai_host import OpenAIHost
from inferplex.targets import Target

T = TypeVar("T")
CHUNK = 1024 * 1024
_STATUSES = ("queued", "in_progress", "completed", "failed")
_TRANSPORT = (aiohttp.ClientError, TimeoutError, OSError)


def video_body(request: VideoRequest, upstream_model: str) -> dict[str, Any]:
    """OpenAI's CreateVideo fields for the upstream (the gateway's `user` is not one of them)."""
    body: dict[str, Any] = {"model": upstream_model, "prompt": request.prompt, "seconds": request.seconds,
                            "size": request.size}  # fmt: skip
    if request.input_reference is not None:
        body["input_reference"] = request.input_reference.model_dump(exclude_none=True)
    return body


def job_status(data: Any) -> JobStatus:
    """OpenAI's `video` object as the gateway reads it; an unknown status is still running."""
    if not isinstance(data, dict):
        raise ValueError("not a video object")
    status = data.get("status")
    progress = data.get("progress")
    error = data.get("error") if isinstance(data.get("error"), dict) else {}
    seconds = data.get("seconds")
    return JobStatus(
        status=status if status in _STATUSES else "in_progress",
        progress=progress if isinstance(progress, int) else 0,
        error=str(error.get("message")) if error and error.get("message") else None,
        seconds=int(seconds) if isinstance(seconds, (str, int)) and str(seconds).isdigit() else None,
        size=data.get("size") if isinstance(data.get("size"), str) else None,
    )


class OpenAIVideos(OpenAIHost):
    """The video calls of `OpenAICompatible` (its `config`, `profile`, session and error map)."""

    def _videos_url(self, *parts: str) -> str:
        base = (self.config.base_url or self.profile.base_url or "").rstrip("/")
        return "/".join([base + "/videos", *(quote(p, safe="") for p in parts)])

    def _video_headers(self, accept: str = "application/json") -> dict[str, str]:
        headers = {"Accept": accept}
        if self.config.api_key:
            headers[self.profile.auth_header] = self.profile.auth_prefix + self.config.api_key.get_secret_value()
        headers.update(self.config.headers)
        return headers

    async def _video_call(self, target: Target, info: CallInfo, method: str, url: str, **send: Any) -> Any:
        """One JSON call, bounded; a non-2xx answer mapped by the provider's error map."""

        async def call(t: Timeouts) -> Any:
            try:
                async with self._session.request(
                    method, url, headers=self._video_headers(), timeout=http.client_timeout(t.connect),
                    allow_redirects=False, **send,
                ) as resp:  # fmt: skip
                    raw = await resp.read()
            except _TRANSPORT as exc:
                raise self.errors.transport(exc) from exc
            if resp.status >= 400:
                raise self.errors.status(resp.status, raw, resp.headers)
            try:
                return orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise self.errors.malformed("sent a body that is not JSON") from exc

        return await _bounded(target, info, call)

    def _job(self, data: Any) -> UpstreamJob:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not data["id"]:
            raise self.errors.malformed("answered a video job without an id")
        return UpstreamJob(data["id"])

    async def video_submit(self, request: GatewayRequest[VideoRequest], target: Target, info: CallInfo) -> UpstreamJob:
        body = video_body(request.body, target.upstream_model)
        url = self._videos_url()
        reference = request.body.reference
        if reference is None:
            return self._job(await self._video_call(target, info, "POST", url, json=body))
        form = aiohttp.FormData()
        for name, value in body.items():
            form.add_field(name, value if isinstance(value, str) else orjson.dumps(value).decode())
        data = await asyncio.to_thread(Path(reference.path).read_bytes)  # an image, within media.max_upload_bytes
        form.add_field("input_reference", data, filename=reference.filename, content_type=reference.content_type)
        return self._job(await self._video_call(target, info, "POST", url, data=form))

    async def video_remix(
        self, source: UpstreamJob, request: GatewayRequest[VideoRequest], target: Target, info: CallInfo
    ) -> UpstreamJob:
        url = self._videos_url(source.upstream_id, "remix")
        return self._job(await self._video_call(target, info, "POST", url, json={"prompt": request.body.prompt}))

    async def video_status(self, job: UpstreamJob, target: Target, info: CallInfo) -> JobStatus:
        data = await self._video_call(target, info, "GET", self._videos_url(job.upstream_id))
        try:
            return job_status(data)
        except ValueError:
            raise self.errors.malformed("answered a video status that is not a video object") from None

    async def video_cancel(self, job: UpstreamJob, target: Target, info: CallInfo) -> bool:
        await self._video_call(target, info, "DELETE", self._videos_url(job.upstream_id))
        return True

    async def video_content(
        self, job: UpstreamJob, variant: str, target: Target, info: CallInfo
    ) -> AsyncIterator[bytes]:
        url = self._videos_url(job.upstream_id, "content")

        async def open_(t: Timeouts) -> aiohttp.ClientResponse:
            try:
                return await self._session.get(
                    url, params={"variant": variant}, headers=self._video_headers("application/binary"),
                    timeout=aiohttp.ClientTimeout(total=None, sock_connect=t.connect, sock_read=t.read),
                    allow_redirects=False,
                )  # fmt: skip
            except _TRANSPORT as exc:
                raise self.errors.transport(exc) from exc

        resp = await _bounded(target, info, open_)
        try:
            if resp.status == 404:
                raise NotFound(f"provider {self.config.name} offers no {variant} for this video", code="no_variant")
            if resp.status >= 400:
                raise self.errors.status(resp.status, await resp.read(), resp.headers)
            try:
                async for chunk in resp.content.iter_chunked(CHUNK):
                    yield chunk
            except _TRANSPORT as exc:
                raise self.errors.transport(exc) from exc
        finally:
            resp.release()


async def _bounded(target: Target, info: CallInfo, call: Callable[[Timeouts], Awaitable[T]]) -> T:
    """The router's attempt timeouts when it made the call (it bounds the attempt), else `http.bounded`."""
    return await (call(info.timeouts) if info.timeouts is not None else http.bounded(target, call))
