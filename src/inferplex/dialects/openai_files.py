"""OpenAI's Files API: `POST /v1/files`, `GET /v1/files`, `GET /v1/files/{id}`, `GET /v1/files/{id}/content`,
`DELETE /v1/files/{id}`, on the gateway's media store (`services.media`: disk or S3, media_store/).

An upload is multipart (`file`, `purpose`, `expires_after[anchor]`/`[seconds]`, as the SDKs send it),
streamed to disk within `media.max_upload_bytes` (413 past it), of any type (a batch's JSONL, a PDF...), then
kept as a stored file of the caller's account (else key): another owner's file is a 404, as is one that has
expired or been deleted. The Files API shows only files of OpenAI's purposes: the batch input files callers
upload and the `batch_output` files the batch worker writes, not the media the other routes store.

When a file expires: `expires_after` if given (OpenAI's bounds, 1 hour to 30 days); else a `batch` file after
30 days, as OpenAI keeps them, but never later than the store's retention (`media.retention_s`), which also
bounds every other purpose (OpenAI keeps those until deleted; a gateway operator decides how long here).
"""

from __future__ import annotations

from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.context import Context
from inferplex.dialects.failure import error_headers
from inferplex.dialects.openai_files_wire import (
    FILE_PURPOSES,
    UPLOAD_PURPOSES,
    FileDeleted,
    FileList,
    FileObject,
    FilePurpose,
)
from inferplex.dialects.paging import limit_of, list_page, order_of
from inferplex.edge import endpoint, json_response
from inferplex.errors import GatewayError, InvalidRequest, NotFound, Unavailable
from inferplex.media_store.files import StoredFile
from inferplex.media_store.store import MediaStore, owner_of
from inferplex.media_store.uploads import ANY_TYPE, FieldKind, read_upload_form

FORM_FIELDS: dict[str, FieldKind] = {"purpose": "str", "expires_after[anchor]": "str", "expires_after[seconds]": "int"}
LISTED = frozenset(FILE_PURPOSES)
MIN_EXPIRY_S, MAX_EXPIRY_S = 3600, 30 * 86400
BATCH_EXPIRY_S = 30 * 86400.0
MAX_PAGE = 10_000  # OpenAI's bound and default for `GET /v1/files`


def file_object(file: StoredFile) -> FileObject:
    """A stored file as OpenAI's `file` object."""
    return {
        "id": file.id,
        "object": "file",
        "bytes": file.bytes,
        "created_at": int(file.created_at),
        "expires_at": None if file.expires_at is None else int(file.expires_at),
        "filename": file.filename,
        "purpose": cast(FilePurpose, file.purpose),
        "status": "processed",
        "status_details": None,
    }


def render_error(err: GatewayError, ctx: Context) -> Response:
    """OpenAI's error object (as `dialects.openai.render_error`, which imports this module)."""
    return json_response(err.to_openai(), error_headers(err, ctx), err.status)


def media_of(request: Request) -> MediaStore:
    media = request.app.state.services.media
    if media is None:
        raise Unavailable("File storage is not running on this gateway.", code="media_unavailable")
    assert isinstance(media, MediaStore)
    return media


def not_found(file_id: str) -> NotFound:
    return NotFound(f"No such File object: {file_id}", param="file_id", code="file_not_found")


async def owned_file(media: MediaStore, ctx: Context, file_id: str) -> StoredFile:
    """The caller's Files API file `file_id` (NotFound for anyone else's, an expired one, or other media)."""
    file = await media.get(file_id, owner_of(ctx.principal))
    if file is None or file.purpose not in LISTED:
        raise not_found(file_id)
    return file


def expiry(purpose: str, fields: dict[str, Any], retention_s: float | None) -> float | None:
    """How long a new file is kept (seconds; None: the store's retention), from `expires_after` or its purpose."""
    anchor = fields.get("expires_after[anchor]")
    seconds = fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        ttl = BATCH_EXPIRY_S if purpose == "batch" else None
    elif anchor != "created_at":
        raise InvalidRequest(
            "Invalid 'expires_after.anchor': the only anchor is 'created_at'.", param="expires_after.anchor"
        )
    elif not isinstance(seconds, int) or not MIN_EXPIRY_S <= seconds <= MAX_EXPIRY_S:
        raise InvalidRequest(
            f"Invalid 'expires_after.seconds': an integer from {MIN_EXPIRY_S} to {MAX_EXPIRY_S}.",
            param="expires_after.seconds",
        )
    else:
        ttl = float(seconds)
    if ttl is not None and retention_s is not None:
        ttl = min(ttl, retention_s)
    return ttl


async def create_file(request: Request, ctx: Context) -> Response:
    media = media_of(request)
    form = await read_upload_form(
        request, max_bytes=media.max_upload_bytes, files={"file": ANY_TYPE}, kinds=FORM_FIELDS
    )
    with form:
        purpose = form.fields.get("purpose")
        if purpose is None:
            raise InvalidRequest(
                "Missing required parameter: 'purpose'.", param="purpose", code="missing_required_parameter"
            )
        if purpose not in UPLOAD_PURPOSES:
            raise InvalidRequest(
                f"Invalid 'purpose': {str(purpose)[:40]!r}; one of {', '.join(UPLOAD_PURPOSES)}.", param="purpose"
            )
        upload = form.file("file")
        if upload is None:
            raise InvalidRequest("Missing required parameter: 'file'.", param="file", code="missing_required_parameter")
        ttl = expiry(purpose, form.fields, media.config.retention_s)
        file = await media.save_upload(owner_of(ctx.principal), upload, purpose=purpose, ttl_s=ttl)
    return json_response(file_object(file), ctx.headers())


def _page_args(request: Request) -> tuple[str | None, int, bool, str | None]:
    q = request.query_params
    limit, order = limit_of(request, MAX_PAGE, MAX_PAGE), order_of(request)
    purpose = q.get("purpose") or None
    if purpose is not None and purpose not in LISTED:
        raise InvalidRequest(f"Invalid 'purpose': one of {', '.join(FILE_PURPOSES)}.", param="purpose")
    return q.get("after") or None, limit, order == "desc", purpose


async def list_files(request: Request, ctx: Context) -> Response:
    media = media_of(request)
    after_id, limit, descending, purpose = _page_args(request)
    after = None
    if after_id is not None:
        after = await media.get(after_id, owner_of(ctx.principal))
        if after is None:
            raise InvalidRequest(f"Invalid 'after': no such file of yours: {after_id[:60]}.", param="after")
    purposes = LISTED if purpose is None else frozenset({purpose})
    files, more = await media.page(owner_of(ctx.principal), purposes, after, limit, descending=descending)
    data = [file_object(f) for f in files]
    body: FileList = list_page(data, more)
    return json_response(body, ctx.headers())


async def retrieve_file(request: Request, ctx: Context) -> Response:
    file = await owned_file(media_of(request), ctx, request.path_params["file_id"])
    return json_response(file_object(file), ctx.headers())


async def file_content(request: Request, ctx: Context) -> Response:
    media = media_of(request)
    file = await owned_file(media, ctx, request.path_params["file_id"])
    response = media.download_response(file, request.headers.get("range"))
    response.headers.update(ctx.headers())
    return response


async def delete_file(request: Request, ctx: Context) -> Response:
    media = media_of(request)
    file = await owned_file(media, ctx, request.path_params["file_id"])
    if not await media.delete(file.id):
        raise not_found(file.id)  # deleted meanwhile by another request
    body: FileDeleted = {"id": file.id, "object": "file", "deleted": True}
    return json_response(body, ctx.headers())


def _route(path: str, handler: Any, method: str) -> Route:
    return Route(path, endpoint(render_error, handler, "chat"), methods=[method])


routes = [
    _route("/v1/files", create_file, "POST"),
    _route("/v1/files", list_files, "GET"),
    _route("/v1/files/{file_id}", retrieve_file, "GET"),
    _route("/v1/files/{file_id}", delete_file, "DELETE"),
    _route("/v1/files/{file_id}/content", file_content, "GET"),
]
