"""What the video adapters of job APIs share: GETs within an attempt's bounds, a streamed download, and the
reference image a request carries.

`http.py` has the POSTs every adapter makes; a job API also polls (GET) and downloads a finished asset, which
may be large, so a download is opened within the attempt's bounds and then streamed a chunk at a time, never
read whole. Errors go through the adapter's own `ErrorMap`, as every other upstream call's do.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson
from yarl import URL

from inferplex.config import Timeouts
from inferplex.errors import InvalidRequest, NotFound
from inferplex.families.videos import VideoRequest
from inferplex.providers import http
from inferplex.providers.failures import ErrorMap
from inferplex.targets import Target

T = TypeVar("T")
CHUNK = 64 * 1024
_TRANSPORT = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


async def within(target: Target, timeouts: Timeouts | None, call: Callable[[Timeouts], Awaitable[T]]) -> T:
    """`call` with the router's per-attempt timeouts, or bounded here (`http.bounded`) when it gave none."""
    return await (call(timeouts) if timeouts is not None else http.bounded(target, call))


def parsed(errors: ErrorMap, parse: Callable[..., T], *args: Any) -> T:
    """A provider's answer read by a pure translator: one that does not fit (a ValueError) is the provider's
    fault, a 502 through the adapter's `ErrorMap`, never the gateway's 500."""
    try:
        return parse(*args)
    except ValueError as exc:
        raise errors.malformed(str(exc)) from exc


def only_video(variant: str, provider: str) -> None:
    """A job API makes the video only: a thumbnail or spritesheet asked of it is a 404, as OpenAI answers one
    it does not have."""
    if variant != "video":
        raise NotFound(f"provider {provider} makes no {variant} for a video", code="not_found")


async def get_object(
    target: Target,
    timeouts: Timeouts | None,
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    headers: Mapping[str, str],
    errors: ErrorMap,
    what: str,
) -> dict[str, Any]:
    """`request_json` for an answer that must be a JSON object (`what` names it in the 502 otherwise)."""
    data = await request_json(target, timeouts, session, method, url, headers, errors)
    if not isinstance(data, dict):
        raise errors.malformed(f"sent {what} that is not an object")
    return data


async def _request(
    session: aiohttp.ClientSession,
    method: str,
    url: str | URL,
    headers: Mapping[str, str],
    timeouts: Timeouts,
    errors: ErrorMap,
    data: bytes | None = None,
) -> aiohttp.ClientResponse:
    """Send and wait for the head; a non-2xx answer is mapped (its body read) and the response released."""
    try:
        resp = await session.request(
            method,
            url if isinstance(url, URL) else URL(url, encoded=True),
            data=data,
            headers=headers,
            timeout=http.client_timeout(timeouts.connect),
            allow_redirects=False,
        )
    except _TRANSPORT as exc:
        raise errors.transport(exc) from exc
    return await http.answered(resp, errors)


async def request_json(
    target: Target,
    timeouts: Timeouts | None,
    session: aiohttp.ClientSession,
    method: str,
    url: str | URL,
    headers: Mapping[str, str],
    errors: ErrorMap,
    body: Any = None,
) -> Any:
    """A buffered JSON call (GET, or a POST with `body`), bounded as an attempt."""

    async def call(t: Timeouts) -> Any:
        data = None if body is None else orjson.dumps(body)
        return await http.read_json(await _request(session, method, url, headers, t, errors, data), errors)

    return await within(target, timeouts, call)


async def download(
    target: Target,
    timeouts: Timeouts | None,
    session: aiohttp.ClientSession,
    url: str | URL,
    headers: Mapping[str, str],
    errors: ErrorMap,
) -> AsyncIterator[bytes]:
    """A GET whose opening is bounded as an attempt, then its body streamed `CHUNK` bytes at a time.

    Redirects are followed (a provider's download link may answer with one to its storage), at most
    `MAX_REDIRECTS`; `headers` (which carry the deployment's key) go only to the first URL's own origin."""
    resp = await within(target, timeouts, lambda t: _follow(session, URL(str(url), encoded=True), headers, t, errors))
    try:
        async for piece in resp.content.iter_chunked(CHUNK):
            yield piece
    except _TRANSPORT as exc:
        raise errors.transport(exc) from exc
    finally:
        resp.close()


MAX_REDIRECTS = 3


async def _follow(
    session: aiohttp.ClientSession, url: URL, headers: Mapping[str, str], timeouts: Timeouts, errors: ErrorMap
) -> aiohttp.ClientResponse:
    origin = url.origin()
    for _ in range(MAX_REDIRECTS + 1):
        resp = await _request(session, "GET", url, headers if url.origin() == origin else {}, timeouts, errors)
        location = resp.headers.get("Location")
        if resp.status not in (301, 302, 303, 307, 308) or not location:
            return resp
        resp.release()
        url = url.join(URL(location, encoded=True))
        if url.scheme not in ("http", "https"):
            break
    raise errors.malformed("sent too many redirects for a download")


@dataclass(frozen=True, slots=True)
class Image:
    """A reference image for a video: its bytes and type, or (`url`) a link the provider fetches itself."""

    mime: str = ""
    data: bytes = b""
    url: str | None = None

    @property
    def b64(self) -> str:
        return base64.b64encode(self.data).decode()


def _data_url(url: str) -> Image:
    head, sep, payload = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        raise InvalidRequest("input_reference.image_url: not a base64 data URL", param="input_reference")
    try:
        data = base64.b64decode(payload, validate=True)
    except ValueError:
        raise InvalidRequest(
            "input_reference.image_url: the data URL is not valid base64", param="input_reference"
        ) from None
    return Image(head[5 : -len(";base64")] or "application/octet-stream", data)


async def reference_image(request: VideoRequest, *, links: bool = False) -> Image | None:
    """The request's reference image: the uploaded file (read from its spool), a data URL, or a link when the
    provider fetches links itself (`links`). A `file_id` reference is a 400: no provider here can read an
    OpenAI file id, and the gateway does not resolve one."""
    if request.reference is not None:
        ref = request.reference
        data = await asyncio.to_thread(Path(ref.path).read_bytes)
        return Image(ref.content_type, data)
    ref_obj = request.input_reference
    if ref_obj is None:
        return None
    if ref_obj.image_url is None:
        raise InvalidRequest(
            "input_reference.file_id is not supported for this model: upload the image, or give it as a data URL",
            param="input_reference",
        )
    if ref_obj.image_url.startswith("data:"):
        return _data_url(ref_obj.image_url)
    if links and ref_obj.image_url.startswith("https://"):
        return Image(url=ref_obj.image_url)
    raise InvalidRequest(
        "input_reference.image_url must be a base64 data URL for this model (or upload the image)",
        param="input_reference",
    )
