"""A stored file as an HTTP answer: streamed in chunks (never whole in memory), with single byte ranges.

RFC 9110's Range: `bytes=a-b`, `bytes=a-` and `bytes=-n` answer 206 with `Content-Range`; a range that
starts past the end answers 416 with `Content-Range: bytes */size`; several ranges, or a header that does
not parse, are ignored (the whole file, 200), as the RFC allows.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import AsyncIterator
from urllib.parse import quote

from starlette.responses import Response, StreamingResponse

from inferplex.edge import json_response
from inferplex.errors import GatewayError
from inferplex.media_store.files import StoredFile

_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)
UNSATISFIABLE = (-1, -1)


class RangeNotSatisfiable(GatewayError):
    status = 416
    type = "invalid_request_error"
    code = "range_not_satisfiable"


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The inclusive byte span `header` asks of a `size`-byte file; None for the whole file; UNSATISFIABLE."""
    if not header:
        return None
    m = _RANGE.match(header)
    if m is None:
        return None  # several ranges, another unit, or junk: the whole file
    first, last = m.group(1), m.group(2)
    if not first:
        if not last:
            return None
        n = int(last)
        return UNSATISFIABLE if n == 0 or size == 0 else (max(0, size - n), size - 1)
    start = int(first)
    end = size - 1 if not last else min(int(last), size - 1)
    if last and int(last) < start:
        return None  # invalid: ignored
    return UNSATISFIABLE if start >= size else (start, end)


def disposition(filename: str) -> str:
    """`inline` with the file's name: an ASCII fallback, and the exact name in RFC 8187's `filename*`."""
    ascii_name = unicodedata.normalize("NFKD", filename).encode("ascii", "ignore").decode()
    ascii_name = re.sub(r"[^A-Za-z0-9._ ()+-]", "_", ascii_name).strip() or "file"
    return f"inline; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename, safe='')}"


def file_response(
    file: StoredFile, chunks: AsyncIterator[bytes] | None, span: tuple[int, int] | None, max_age: int
) -> Response:
    """The answer for `file`: `chunks` are the bytes of `span` (inclusive; None: all), or None for a HEAD."""
    size = file.bytes
    if span == UNSATISFIABLE:
        err = RangeNotSatisfiable(f"The range asked for is outside the file's {size} bytes.")
        return json_response(err.to_openai(), {"content-range": f"bytes */{size}"}, 416)
    headers = {
        "content-disposition": disposition(file.filename),
        "accept-ranges": "bytes",
        "cache-control": f"private, max-age={max(0, max_age)}",
        "x-content-type-options": "nosniff",
    }
    status = 200
    length = size
    if span is not None:
        status = 206
        length = span[1] - span[0] + 1
        headers["content-range"] = f"bytes {span[0]}-{span[1]}/{size}"
    headers["content-length"] = str(length)
    if chunks is None:
        return Response(None, status, headers, media_type=file.content_type)
    return StreamingResponse(chunks, status, headers, media_type=file.content_type)
