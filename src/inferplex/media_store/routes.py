"""`GET /v1/media/{file_id}?expires=...&signature=...`: a stored file, through the gateway's signed URL.

No bearer key: the URL is the credential (media_store/signing.py), so it can be handed to a browser or an
`<img>` tag. A bad signature or a past expiry is a 403, a file that is gone (deleted, swept) a 404, both as
OpenAI error objects; the file itself is streamed with its type, length, name and byte ranges
(media_store/download.py). The OpenAI dialect serves this list (`dialects/openai.py`).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.context import Context
from inferplex.dialects.failure import error_headers
from inferplex.edge import endpoint, json_response
from inferplex.errors import GatewayError, NotFound, PermissionDenied, Unavailable
from inferplex.media_store.store import ROUTE, MediaStore


def render_error(err: GatewayError, ctx: Context) -> Response:
    return json_response(err.to_openai(), error_headers(err, ctx), err.status)


async def download(request: Request, ctx: Context) -> Response:
    media: MediaStore | None = getattr(request.app.state.services, "media", None)
    if media is None:
        raise Unavailable("Media storage is not running on this gateway.", code="media_unavailable")
    file_id = request.path_params["file_id"]
    query = request.query_params
    problem = media.signer.check(file_id, query.get("expires", ""), query.get("signature", ""))
    if problem == "expired":
        raise PermissionDenied("This download URL has expired.", param="expires", code="url_expired")
    if problem is not None:
        raise PermissionDenied(
            "This download URL's signature is not valid.", param="signature", code="invalid_signature"
        )
    file = await media.get(file_id)
    if file is None:
        raise NotFound(f"The file `{file_id}` does not exist (it may have expired).", code="file_not_found")
    return media.download_response(file, request.headers.get("range"), head=request.method == "HEAD")


routes = [Route(ROUTE + "{file_id}", endpoint(render_error, download, None), methods=["GET"])]
