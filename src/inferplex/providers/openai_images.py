"""Images on OpenAI-compatible upstreams (OpenAI, Azure OpenAI's deployments, Together, ...): a mixin of
`OpenAICompatible` (providers/openai_compat.py).

`POST {base}/images/generations` (JSON, SSE when streamed), `/images/edits` and `/images/variations`
(multipart). `response_format` is the gateway's (it returns `b64_json` or its own signed URL), so it is never
forwarded: an upstream that answers with a URL (dall-e's default) has it fetched here, server-side, and the
caller never sees it. What each OpenAI model cannot do is in `MODEL_CAPS` (by the upstream model id's prefix):
dall-e-3 makes one image per call (`n` is emulated by several calls), dall-e has no `background`,
`output_format`, `moderation` or streaming, the GPT image models no `style`; other models are forwarded as sent.

Vendor profiles: Together's endpoint takes `width`/`height` for `size` and none of OpenAI's own options;
Fireworks serves FLUX through its workflow API (`POST {base}/workflows/{model}/text_to_image`, `prompt` and
`aspect_ratio`, the image's bytes back), one image a call.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from yarl import URL

from inferplex.capabilities import Support
from inferplex.config import Timeouts
from inferplex.families.images import (
    PARTIAL_IMAGES,
    ImageCaps,
    ImageEditRequest,
    ImageFile,
    ImageRequest,
    ImagesAnswer,
    ImageVariationRequest,
    merge_answers,
    plan_images,
    size_ratio,
)
from inferplex.gateway_request import GatewayRequest
from inferplex.providers import http
from inferplex.providers.base import CallInfo
from inferplex.providers.failures import ErrorMap
from inferplex.providers.openai_host import OpenAIHost
from inferplex.targets import Target

D = Support.DROPPED
_DALL_E = {"background": D, "output_format": D, "output_compression": D, "moderation": D, "input_fidelity": D}
MODEL_CAPS: dict[str, ImageCaps] = {
    "dall-e-3": ImageCaps({**_DALL_E}, max_n=1),
    "dall-e-2": ImageCaps({**_DALL_E, "style": D}),
    "gpt-image": ImageCaps({"style": D}, stream=True),
    "chatgpt-image": ImageCaps({"style": D}, stream=True),
}
OTHER = ImageCaps()
# Together's `/images/generations` (FLUX and others): `width`/`height` for a size, no OpenAI-only options.
TOGETHER = ImageCaps(
    {"quality": D, "style": D, "background": D, "moderation": D, "output_compression": D, "user": D}, max_n=4
)
# Never forwarded: the gateway answers these itself.
_OWN = ("response_format", "stream", "partial_images")
MAX_IMAGE_BYTES = 64 * 1024 * 1024


# Fireworks' FLUX workflows (`/workflows/{model}/text_to_image`): one image a call, an aspect ratio.
FIREWORKS = ImageCaps({**TOGETHER.support, "output_compression": D}, max_n=1)
FIREWORKS_RATIOS = ("1:1", "21:9", "16:9", "3:2", "5:4", "4:5", "2:3", "9:16", "9:21", "4:3", "3:4")


def caps_for(upstream_model: str, vendor: str = "openai") -> ImageCaps:
    if vendor in ("together", "fireworks"):
        return TOGETHER if vendor == "together" else FIREWORKS
    for prefix, caps in MODEL_CAPS.items():
        if upstream_model.startswith(prefix):
            return caps
    return OTHER


class OpenAIImages(OpenAIHost):
    """The image families for `OpenAICompatible` (its session, headers, error map and chat URL)."""

    def _image_url(self, name: str) -> URL:
        """`{base}/images/{name}`, with the chat URL's query (Azure's api-version)."""
        base = self._chat_url.with_query(None).parent.parent
        return (base / "images" / name).with_query(self._chat_url.query)

    async def generate_image(
        self, request: GatewayRequest[ImageRequest], target: Target, info: CallInfo
    ) -> ImagesAnswer:
        plan = plan_images(request, caps_for(target.upstream_model, self.profile.name), target, info)
        if self.profile.name == "fireworks":
            return await _fan_out(plan.counts, lambda n: self._workflow(plan.request.body, target, info))
        url, timeouts = self._image_url("generations"), info.timeouts

        def one(n: int) -> Coroutine[Any, Any, ImagesAnswer]:
            body = _fields(plan.request.wire(), target.upstream_model, n)
            if self.profile.name == "together":
                body = _together(body)
            if plan.stream:
                body["stream"] = True
                body["partial_images"] = plan.request.body.partial_images or 0
                return self._stream(url, body, target, info)
            return self._post_json(url, body, target, info, timeouts)

        return await _fan_out(plan.counts, one)

    async def edit_image(
        self, request: GatewayRequest[ImageEditRequest], target: Target, info: CallInfo
    ) -> ImagesAnswer:
        plan = plan_images(request, caps_for(target.upstream_model, self.profile.name), target, info)
        body = plan.request.body
        files = [("image[]" if len(body.image) > 1 else "image", f) for f in body.image]
        if body.mask is not None:
            files.append(("mask", body.mask))
        partials = (body.partial_images or 0) if plan.stream else None
        return await self._multipart("edits", plan.request.wire(), files, plan.counts, target, info, partials)

    async def vary_image(
        self, request: GatewayRequest[ImageVariationRequest], target: Target, info: CallInfo
    ) -> ImagesAnswer:
        plan = plan_images(request, caps_for(target.upstream_model, self.profile.name), target, info)
        files = [("image", plan.request.body.image)]
        return await self._multipart("variations", plan.request.wire(), files, plan.counts, target, info)

    async def _multipart(
        self,
        name: str,
        wire: Mapping[str, Any],
        files: list[tuple[str, ImageFile]],
        counts: tuple[int, ...],
        target: Target,
        info: CallInfo,
        partials: int | None = None,
    ) -> ImagesAnswer:
        """A multipart call per count; streamed (SSE, collected) when `partials` is set."""
        url = self._image_url(name)

        async def one(n: int) -> ImagesAnswer:
            fields = _fields(wire, target.upstream_model, n)
            fields.pop("image", None)
            fields.pop("mask", None)
            if partials is not None:
                fields.update(stream=True, partial_images=partials)
            data, content_type = encode_multipart(fields, files)
            headers = {**self._auth(self._headers, info), "Content-Type": content_type}
            if partials is not None:
                headers["Accept"] = "text/event-stream"
            resp = await _open_bytes(target, info.timeouts, self._session, url, data, headers, self.errors)
            if partials is not None:
                return await self._collect(resp)
            return await self._answer(await http.read_json(resp, self.errors), target, info)

        return await _fan_out(counts, one)

    async def _post_json(
        self, url: URL, body: dict[str, Any], target: Target, info: CallInfo, timeouts: Timeouts | None
    ) -> ImagesAnswer:
        headers = self._auth(self._headers, info)
        data, _ = await http.post_json_within(target, timeouts, self._session, url, body, headers, self.errors)
        return await self._answer(data, target, info)

    async def _stream(self, url: URL, body: dict[str, Any], target: Target, info: CallInfo) -> ImagesAnswer:
        """A streamed generation, collected: its partial images in order, then the completed image(s)."""
        headers = {**self._auth(self._headers, info), "Accept": "text/event-stream"}
        resp = await http.open_stream_within(target, info.timeouts, self._session, url, body, headers, self.errors)
        return await self._collect(resp)

    async def _collect(self, resp: aiohttp.ClientResponse) -> ImagesAnswer:
        """OpenAI's image stream events (`image_generation.*`, `image_edit.*`) read to the end; each partial
        image is also handed to the route's `PARTIAL_IMAGES` sink as it arrives (live SSE)."""
        partials: list[str] = []
        sink = PARTIAL_IMAGES.get()
        answer: ImagesAnswer = {"created": int(time.time()), "data": []}
        done = False
        try:
            async for _, event in http.json_events(resp, self.errors):
                if not isinstance(event, dict):
                    continue
                kind = event.get("type", "")
                if kind.endswith(".partial_image"):
                    partials.append(str(event.get("b64_json", "")))
                    if sink is not None:
                        sink(event)
                elif kind.endswith(".completed"):
                    done = True
                    answer["data"].append({"b64_json": event.get("b64_json", "")})
                    for key in ("size", "quality", "background", "output_format", "usage"):
                        if key in event:
                            answer[key] = event[key]
                elif kind == "error" or "error" in event:
                    raise self.errors.event(event)
        finally:
            resp.close()
        if not done:
            raise self.errors.malformed("ended the image stream before it was complete")
        answer["partials"] = partials
        return answer

    async def _workflow(self, body: ImageRequest, target: Target, info: CallInfo) -> ImagesAnswer:
        """One image from a Fireworks FLUX workflow: `{prompt, aspect_ratio}` in, the image's bytes out."""
        base = self._chat_url.with_query(None).parent.parent
        url = base.with_path(f"{base.path.rstrip('/')}/workflows/{target.upstream_model}/text_to_image")
        payload: dict[str, Any] = {"prompt": body.prompt}
        ratio = size_ratio(body.size, FIREWORKS_RATIOS)
        if ratio is not None:
            payload["aspect_ratio"] = ratio
        fmt = "jpeg" if body.output_format == "jpeg" else "png"
        headers = {**self._auth(self._headers, info), "Accept": f"image/{fmt}"}
        data = orjson.dumps(payload)
        resp = await _open_bytes(target, info.timeouts, self._session, url, data, headers, self.errors)
        try:
            raw = await _read_capped(resp, MAX_IMAGE_BYTES, self.errors)
        except (aiohttp.ClientError, OSError) as exc:
            raise self.errors.transport(exc) from exc
        finally:
            resp.release()
        if not resp.content_type.startswith("image/"):
            raise self.errors.malformed(f"answered {resp.content_type} where an image was asked for")
        answer: ImagesAnswer = {"created": int(time.time()), "data": [{"b64_json": base64.b64encode(raw).decode()}]}
        answer["output_format"] = fmt
        return answer

    async def _answer(self, data: Any, target: Target, info: CallInfo) -> ImagesAnswer:
        """The upstream's ImagesResponse, every image inline: a URL is fetched here, never passed on."""
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            raise self.errors.malformed("sent an images response without data")
        out: list[dict[str, Any]] = []
        for item in data["data"]:
            if not isinstance(item, dict):
                raise self.errors.malformed("sent an image that is not an object")
            item = dict(item)
            link = item.pop("url", None)
            if not item.get("b64_json"):
                if not isinstance(link, str):
                    raise self.errors.malformed("sent an image with neither b64_json nor url")
                item["b64_json"] = await self._fetch(link, target, info)
                data["_format"] = "url"
            out.append(item)
        data["data"] = out
        return data

    async def _fetch(self, link: str, target: Target, info: CallInfo) -> str:
        """A provider's image URL read server-side (with the provider's key only on the provider's own host),
        returned as base64."""
        url = URL(link)
        if url.scheme not in ("http", "https"):
            raise self.errors.malformed("sent an image URL that is not http(s)")
        same_host = url.host == self._chat_url.host
        headers = self._auth(self._headers, info) if same_host else {}
        headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}

        async def get(t: Timeouts) -> bytes:
            try:
                async with self._session.get(
                    url, headers=headers, timeout=http.client_timeout(t.connect), allow_redirects=True
                ) as resp:
                    if resp.status >= 400:
                        raise self.errors.status(resp.status, await resp.read(), resp.headers)
                    return await _read_capped(resp, MAX_IMAGE_BYTES, self.errors)
            except (aiohttp.ClientError, OSError) as exc:
                raise self.errors.transport(exc) from exc

        raw = await (get(info.timeouts) if info.timeouts is not None else http.bounded(target, get))
        return base64.b64encode(raw).decode()


def _fields(wire: Mapping[str, Any], upstream_model: str, n: int) -> dict[str, Any]:
    body = {k: v for k, v in wire.items() if k not in _OWN}
    body["model"] = upstream_model
    if n != 1 or "n" in body:
        body["n"] = n
    return body


def _together(body: dict[str, Any]) -> dict[str, Any]:
    """Together takes `width` and `height` where OpenAI takes `size`."""
    size = body.pop("size", None)
    if isinstance(size, str) and "x" in size:
        width, height = size.split("x")
        body["width"], body["height"] = int(width), int(height)
    return body


async def _fan_out(counts: tuple[int, ...], one: Callable[[int], Coroutine[Any, Any, ImagesAnswer]]) -> ImagesAnswer:
    if len(counts) == 1:
        return merge_answers([await one(counts[0])])
    return merge_answers(list(await asyncio.gather(*(one(n) for n in counts))))


async def _read_capped(resp: aiohttp.ClientResponse, limit: int, errors: ErrorMap) -> bytes:
    chunks, total = [], 0
    async for chunk in resp.content.iter_chunked(1 << 16):
        total += len(chunk)
        if total > limit:
            raise errors.malformed(f"sent an image larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def encode_multipart(fields: Mapping[str, Any], files: list[tuple[str, ImageFile]]) -> tuple[bytes, str]:
    """A multipart/form-data body: each field as text (JSON for lists and objects), then the files."""
    boundary = "inferplex-" + secrets.token_hex(12)
    parts: list[bytes] = []
    for name, value in fields.items():
        if value is None:
            continue
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        if isinstance(value, bool):
            text = "true" if value else "false"
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{_q(name)}"\r\n\r\n'.encode())
        parts.append(text.encode() + b"\r\n")
    for name, f in files:
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{_q(name)}"; filename="{_q(f.filename)}"\r\n'
            f"Content-Type: {f.content_type}\r\n\r\n"
        )
        parts += [head.encode(), f.data, b"\r\n"]
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def _q(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', "%22").replace("\r", "%0D").replace("\n", "%0A")


async def _open_bytes(
    target: Target,
    timeouts: Timeouts | None,
    session: aiohttp.ClientSession,
    url: URL,
    data: bytes,
    headers: Mapping[str, str],
    errors: ErrorMap,
) -> aiohttp.ClientResponse:
    """A POST of a ready body (a multipart form) within the attempt's timeouts, up to the answer's head; a
    failure status is the provider's error. The caller reads (and closes) the response."""

    async def post(t: Timeouts) -> aiohttp.ClientResponse:
        try:
            resp = await session.post(
                url, data=data, headers=headers, timeout=http.client_timeout(t.connect), allow_redirects=False
            )
            if resp.status >= 400:
                try:
                    raw = await resp.read()
                finally:
                    resp.release()
                raise errors.status(resp.status, raw, resp.headers)
        except (aiohttp.ClientError, OSError) as exc:
            raise errors.transport(exc) from exc
        return resp

    return await (post(timeouts) if timeouts is not None else http.bounded(target, post))


class AzureImages:
    """The image families for Azure OpenAI: its deployment's OpenAI-compatible adapter (with these methods)
    at the deployment URL with `api-version`."""

    if TYPE_CHECKING:

        def _for(self, target: Target) -> Any: ...  # AzureOpenAI's

    async def generate_image(
        self, request: GatewayRequest[ImageRequest], target: Target, info: CallInfo
    ) -> ImagesAnswer:
        return await self._for(target).generate_image(request, target, info)  # type: ignore[no-any-return]

    async def edit_image(
        self, request: GatewayRequest[ImageEditRequest], target: Target, info: CallInfo
    ) -> ImagesAnswer:
        return await self._for(target).edit_image(request, target, info)  # type: ignore[no-any-return]
