"""OpenAI's image routes: `POST /v1/images/generations` (JSON), `/v1/images/edits` and `/v1/images/variations`
(multipart), answered through `Pipeline.run` with the image families (families/images.py).

`response_format` is the gateway's: `b64_json` inline, or `url`, the image saved to the gateway's media store
(`services.media`) and its own signed, expiring URL returned, never a provider's. Unset, it is what the model
answers by default on OpenAI (a URL for dall-e, base64 for the GPT image models). `stream: true` answers
OpenAI's SSE events (`image_generation.partial_image`, `image_generation.completed`; `image_edit.*` for an
edit), from the provider's partial images where it streams them, else the completed images only.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio.to_thread
import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.context import Context
from inferplex.dialects.failure import error_headers
from inferplex.dialects.registry import Rendering
from inferplex.edge import endpoint, json_response, read_json
from inferplex.errors import GatewayError, InvalidRequest
from inferplex.families.base import Family
from inferplex.families.images import (
    IMAGE_EDITS,
    IMAGE_VARIATIONS,
    IMAGES,
    PARTIAL_IMAGES,
    ImageEditRequest,
    ImageFile,
    ImageRequest,
    ImagesAnswer,
    ImageVariationRequest,
)
from inferplex.gateway_request import GatewayRequest, parse_request
from inferplex.media_store.store import MediaStore, owner_of
from inferplex.media_store.uploads import FieldKind, UploadedFile, read_upload_form
from inferplex.services import Services
from inferplex.sse import encode
from inferplex.streaming import SSEResponse

MAX_UPLOAD_BYTES = 64 * 1024 * 1024  # without a media store's `max_upload_bytes`


def _render_error(err: GatewayError, ctx: Context) -> Response:
    """OpenAI's error object (as dialects/openai.render_error, which lists these routes)."""
    return json_response(err.to_openai(), error_headers(err, ctx), err.status)


async def generations(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    data = await read_json(request, services.max_body_bytes, services.json_limits)
    parsed = parse_request(ImageRequest, data)
    return await _serve(request, IMAGES, parsed, ctx, "image_generation")


async def edits(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    fields = await read_image_form(request, _upload_limit(services))
    parsed = _without_files(parse_request(ImageEditRequest, fields))
    return await _serve(request, IMAGE_EDITS, parsed, ctx, "image_edit")


async def variations(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    fields = await read_image_form(request, _upload_limit(services))
    images = fields.get("image")
    if isinstance(images, list):
        if len(images) != 1:
            raise InvalidRequest("Invalid value for 'image': send exactly one image.", param="image")
        fields["image"] = images[0]
    parsed = _without_files(parse_request(ImageVariationRequest, fields))
    return await _serve(request, IMAGE_VARIATIONS, parsed, ctx, "image_generation")


async def _serve(
    request: Request, family: Family[Any, Any, Any], parsed: GatewayRequest[Any], ctx: Context, events: str
) -> Response:
    services: Services = request.app.state.services
    store = services.media
    if store is None and parsed.body.response_format == "url":  # refused before anything is charged
        raise InvalidRequest(
            "Invalid value for 'response_format': this gateway has no media store for image URLs; ask for b64_json.",
            param="response_format",
        )
    if getattr(parsed.body, "stream", None):
        return await _stream(services, family, parsed, ctx, events)
    answer: ImagesAnswer = await services.pipeline.run(family, ctx, parsed)
    wanted = parsed.body.response_format or answer.get("_format") or "b64_json"
    if wanted == "url" and store is not None:
        await to_urls(store, owner_of(ctx.principal), answer, str(request.base_url))
    return _images_result(answer, parsed, ctx)


def _images_result(answer: ImagesAnswer, request: GatewayRequest[Any], ctx: Context) -> Response:
    body = {k: v for k, v in answer.items() if k not in ("partials", "_format")}
    body.setdefault("created", int(time.time()))
    return json_response(body, ctx.headers())


RENDERS = {
    IMAGES.name: Rendering(_images_result),
    IMAGE_EDITS.name: Rendering(_images_result),
    IMAGE_VARIATIONS.name: Rendering(_images_result),
}


# Streamed requests whose caller left: kept until they finish, so that what the provider made is settled.
_DETACHED: set[asyncio.Task[Any]] = set()
_COMMON = ("created_at", "size", "quality", "background", "output_format")


async def _stream(
    services: Services, family: Family[Any, Any, Any], parsed: GatewayRequest[Any], ctx: Context, prefix: str
) -> Response:
    """A streamed request: its partial images sent as the provider sends them (the pipeline's call runs in a
    task of its own, which hands them over through `PARTIAL_IMAGES`), then the completed images. A failure
    before the first event is an ordinary error answer; after it, an `error` event ends the stream."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    token = PARTIAL_IMAGES.set(queue.put_nowait)
    try:
        task = asyncio.create_task(services.pipeline.run(family, ctx, parsed))
    finally:
        PARTIAL_IMAGES.reset(token)
    try:
        first = await _first(queue, task)
    except BaseException:
        task.cancel()
        raise
    return SSEResponse(_live(queue, task, first, prefix, ctx), ctx.headers())  # type: ignore[return-value]


async def _first(queue: asyncio.Queue[dict[str, Any]], task: asyncio.Task[ImagesAnswer]) -> dict[str, Any] | None:
    """The first partial image event, or None when the call finished without one (its failure raised)."""
    getter = asyncio.ensure_future(queue.get())
    try:
        await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not getter.done():
            getter.cancel()
    if getter.done() and not getter.cancelled():
        return getter.result()
    task.result()
    return None


async def _live(
    queue: asyncio.Queue[dict[str, Any]],
    task: asyncio.Task[ImagesAnswer],
    first: dict[str, Any] | None,
    prefix: str,
    ctx: Context,
) -> AsyncIterator[bytes]:
    sent = 0
    try:
        event = first
        while event is not None:
            yield _partial(event, prefix, sent)
            sent += 1
            event = await _first(queue, task)
        answer = task.result()
        for index, partial in enumerate((answer.get("partials") or ())[sent:], start=sent):
            yield _partial({"b64_json": partial, **_common(answer)}, prefix, index)
        async for frame in _completed(answer, prefix):
            yield frame
    except GatewayError as err:
        yield encode(orjson.dumps({"type": "error", "error": err.to_openai()["error"]}), "error")
    finally:
        if not task.done():  # the caller left: the call finishes (and is settled) without it
            _DETACHED.add(task)
            task.add_done_callback(_forget)


def _forget(task: asyncio.Task[Any]) -> None:
    _DETACHED.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a failure after the caller left is settled, not logged as lost


def _common(answer: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "created_at": int(answer.get("created") or time.time()),
        "size": answer.get("size") or "auto",
        "quality": answer.get("quality") or "auto",
        "background": answer.get("background") or "auto",
        "output_format": answer.get("output_format") or "png",
    }


def _partial(event: Mapping[str, Any], prefix: str, index: int) -> bytes:
    out = {"type": f"{prefix}.partial_image", "b64_json": event.get("b64_json", "")}
    out.update({k: event[k] for k in _COMMON if k in event})
    out.setdefault("created_at", int(time.time()))
    out["partial_image_index"] = index
    return encode(orjson.dumps(out), out["type"])


async def _completed(answer: ImagesAnswer, prefix: str) -> AsyncIterator[bytes]:
    """One completed event per image (OpenAI's ImageGenCompletedEvent / ImageEditCompletedEvent)."""
    common = _common(answer)
    usage = answer.get("usage") or {
        "total_tokens": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "input_tokens_details": {"text_tokens": 0, "image_tokens": 0},
    }
    for item in answer.get("data") or ():
        event = {"type": f"{prefix}.completed", "b64_json": item.get("b64_json", ""), **common, "usage": usage}
        yield encode(orjson.dumps(event), event["type"])


async def to_urls(store: MediaStore, owner: str, answer: ImagesAnswer, base_url: str) -> None:
    """Each image of `answer` saved to the media store as `owner`'s, its `b64_json` replaced by the gateway's
    signed URL (absolute from `base_url` unless `media.public_base_url` is set). Any dialect's image route
    answering URLs uses this."""
    fmt = answer.get("output_format") or "png"
    for item in answer.get("data") or ():
        raw = base64.b64decode(item.pop("b64_json", "") or "")
        stored = await store.save_bytes(
            owner, raw, filename=f"image.{fmt}", content_type=f"image/{fmt}", purpose="image"
        )
        item["url"] = store.url(stored, base_url=base_url)


# ---- multipart --------------------------------------------------------------------------------------------

_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp"})
_FORM_FILES = {"image": _IMAGE_TYPES, "mask": frozenset({"image/png"})}
# Every text field of an edit or variation form, with the gateway's own (drop_params, provider, ...).
_FORM_KINDS: dict[str, FieldKind] = {
    **{name: "str" for name in ("model", "prompt", "quality", "response_format", "output_format", "background",
                               "input_fidelity", "size", "user", "moderation", "style", "provider")},
    "n": "int",
    "output_compression": "int",
    "partial_images": "int",
    "stream": "bool",
    "drop_params": "bool",
}  # fmt: skip


def _upload_limit(services: Services) -> int:
    media = getattr(services, "media", None)
    return int(getattr(getattr(media, "config", None), "max_upload_bytes", 0) or MAX_UPLOAD_BYTES)


async def read_image_form(request: Request, max_bytes: int) -> dict[str, Any]:
    """An image form as the JSON-like dict its canonical request validates: `image` a list of `ImageFile`s
    (from `image` or `image[]`), `mask` one, the other fields read as their kinds. The body is streamed to
    disk within `max_bytes` (413), each file checked by its bytes (PNG, JPEG or WebP; a mask PNG: 415), a
    broken form a 400 (media_store/uploads.py)."""
    form = await read_upload_form(request, max_bytes=max_bytes, files=_FORM_FILES, kinds=_FORM_KINDS)
    with form:
        out: dict[str, Any] = dict(form.fields)
        for name, files in form.files.items():
            images = [await _image_file(f) for f in files]
            if name == "mask":
                if len(images) != 1:
                    raise InvalidRequest("Invalid value for 'mask': send one mask.", param="mask")
                out["mask"] = images[0]
            else:
                out["image"] = images
    return out


async def _image_file(f: UploadedFile) -> ImageFile:
    data = await anyio.to_thread.run_sync(f.path.read_bytes)
    return ImageFile(filename=f.filename, content_type=f.content_type, data=data)


def _without_files(parsed: GatewayRequest[Any]) -> GatewayRequest[Any]:
    """The request with a wire of its fields only: the files travel on the body, never as JSON."""
    wire = {k: v for k, v in parsed.wire().items() if k not in ("image", "mask")}
    return GatewayRequest(parsed.body, parsed.options, wire)


def _route(path: str, handler: Any) -> Route:
    return Route(path, endpoint(_render_error, handler, "images"), methods=["POST"])


routes = [
    _route("/v1/images/generations", generations),
    _route("/v1/images/edits", edits),
    _route("/v1/images/variations", variations),
]
