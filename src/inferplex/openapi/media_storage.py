"""The media store's download route (media_store/routes.py) in `/openapi.json`."""

from __future__ import annotations

from inferplex.dialects import openai_responses as oa
from inferplex.openapi.spec import Dialect, Operation, Param

_OPENAI = Dialect("OpenAI", oa.OpenAIError)

_DOWNLOAD = (
    "A stored file (a generated image, speech or video, or an upload) through the gateway's signed URL, as "
    "the media routes hand it out: no bearer key, the signature is the credential. Streamed, with "
    "`Content-Type`, `Content-Length`, `Content-Disposition` (the file's name) and `Accept-Ranges: bytes`; "
    "a `Range: bytes=a-b` header answers 206 with that part. 403 for a bad or expired signature, 404 once "
    "the file is gone (deleted, or past its retention)."
)

OPERATIONS: list[Operation] = [
    Operation(
        "get",
        "/v1/media/{file_id}",
        "Download a stored file (signed URL)",
        _OPENAI,
        None,
        (403, 404, 416, 500, 503),
        params=(
            Param(
                "expires",
                {"type": "string", "pattern": "^[0-9]+$"},
                required=True,
                description="when the URL expires (UNIX seconds)",
            ),
            Param("signature", required=True, description="the gateway's HMAC-SHA256 signature of id and expiry"),
            Param("range", where="header", description="one byte range, e.g. `bytes=0-1023`"),
        ),
        description=_DOWNLOAD,
        authenticated=False,
        ok_media="*/*",
    ),
]
