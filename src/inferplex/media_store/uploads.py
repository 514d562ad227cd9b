"""Multipart uploads (image edits, transcription files, reference images), streamed to disk as they arrive.

Starlette's `request.form()` is not enough here: it has no limit on the files' total size (`max_part_size`
bounds text fields only), and it keeps files under 1 MiB in memory, with no path to hand on. So the body is
read here, message by message, through python-multipart's parser (the one Starlette uses): each file goes
straight to a temporary file in the store's upload directory, the whole body is refused with a 413 as soon
as it passes `max_bytes` (nothing more is read), and each file's first bytes are checked against the types
its field accepts (media_store/sniff.py): a format not accepted is a 415, bytes that contradict the type the
part declares a 400. Text fields are converted by their declared kind. The temporary files are deleted by
`UploadForm.close()` (the form is a context manager), and in any case by the store's sweep a day later.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

import anyio.to_thread
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from inferplex.errors import InvalidRequest, PayloadTooLarge, UnsupportedMediaType
from inferplex.media_store.sniff import HEAD_BYTES, canonical, verdict

if TYPE_CHECKING:  # python-multipart declares its callbacks' type for type checkers only
    from python_multipart.multipart import MultipartCallbacks

# How a text field is read: `list` gathers a repeated field (`name` or `name[]`, as OpenAI's SDKs send
# arrays) into a list of strings; `json` parses an object sent as text.
FieldKind = Literal["str", "int", "float", "bool", "json", "list"]
# The accepted types of a field that takes a file of any type (the Files API's `file`): its bytes are not
# sniffed, and its type is the one the part declares (else application/octet-stream).
ANY_TYPE: frozenset[str] = frozenset({"*/*"})
MAX_FIELD_BYTES = 1024 * 1024
MAX_FIELDS = 1000
MAX_FILES = 16
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


@dataclass(frozen=True, slots=True)
class UploadedFile:
    """One uploaded file on disk: `content_type` is the canonical type its bytes were found to be."""

    path: Path
    filename: str
    content_type: str
    bytes: int


@dataclass(slots=True, weakref_slot=True)
class UploadForm:
    """The form's text fields (converted) and files (on disk). The files are deleted by `close()` (or leaving
    `with form:`), and at the latest when the form itself is garbage (the end of the request that read it,
    unless something keeps the form): keep a file beyond that with `MediaStore.save_upload`."""

    fields: dict[str, Any] = field(default_factory=dict)
    files: dict[str, list[UploadedFile]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        weakref.finalize(self, _unlink_all, self.files)

    def file(self, name: str) -> UploadedFile | None:
        found = self.files.get(name)
        return found[0] if found else None

    def close(self) -> None:
        """Delete the temporary files."""
        _unlink_all(self.files)

    def __enter__(self) -> UploadForm:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unlink_all(files: dict[str, list[UploadedFile]]) -> None:
    for found in files.values():
        for f in found:
            with contextlib.suppress(OSError):
                os.unlink(f.path)


def _field_name(raw: str) -> str:
    return raw[:-2] if raw.endswith("[]") else raw


class _Part:
    """The part being read: its headers, then its text or its file."""

    __slots__ = ("declared", "filename", "head", "name", "out", "path", "size", "text")

    def __init__(self) -> None:
        self.name = ""
        self.filename: str | None = None
        self.declared = ""
        self.text = bytearray()
        self.head = b""  # a file's first bytes, until checked
        self.path: Path | None = None
        self.out: BinaryIO | None = None
        self.size = 0


class _Reader:
    """The parser's callbacks, queued as events and acted on between body messages (files are written on
    a thread, so the event loop never waits on the disk)."""

    def __init__(self, files: Mapping[str, set[str] | frozenset[str]], kinds: Mapping[str, FieldKind], dir: str | None):
        self.allowed = files
        self.kinds = kinds
        self.dir = dir
        self.form = UploadForm()
        self.events: list[tuple[str, bytes]] = []
        self.header_field = b""
        self.headers: dict[bytes, bytes] = {}
        self.part = _Part()
        self.count = 0

    def callbacks(self) -> MultipartCallbacks:
        def data(kind: str) -> Callable[[bytes, int, int], None]:
            return lambda buf, start, end: self.events.append((kind, bytes(buf[start:end])))

        return {
            "on_part_begin": lambda: self.events.append(("begin", b"")),
            "on_part_data": data("data"),
            "on_part_end": lambda: self.events.append(("end", b"")),
            "on_header_field": data("hfield"),
            "on_header_value": data("hvalue"),
            "on_header_end": lambda: self.events.append(("hend", b"")),
            "on_headers_finished": lambda: self.events.append(("headers", b"")),
        }

    async def drain(self) -> None:
        events, self.events = self.events, []
        pending: list[bytes] = []
        for kind, data in events:
            if kind == "data":
                pending += self._data(data)
                continue
            if pending:
                await self._write(pending)
                pending = []
            if kind == "begin":
                self.part = _Part()
                self.headers = {}
            elif kind == "hfield":
                self.header_field += data
            elif kind == "hvalue":
                self.headers[self.header_field.lower()] = self.headers.get(self.header_field.lower(), b"") + data
            elif kind == "hend":
                self.header_field = b""
            elif kind == "headers":
                await self._start_part()
            elif kind == "end":
                await self._end_part()
        if pending:
            await self._write(pending)

    async def _start_part(self) -> None:
        part = self.part
        self.count += 1
        if self.count > MAX_FIELDS:
            raise InvalidRequest(f"The form has more than {MAX_FIELDS} parts.", code="invalid_multipart")
        _, options = parse_options_header(self.headers.get(b"content-disposition", b""))
        part.name = _field_name(options.get(b"name", b"").decode("utf-8", "replace"))
        raw_filename = options.get(b"filename")
        part.declared = self.headers.get(b"content-type", b"").decode("latin-1")
        if raw_filename is None:
            if part.name not in self.kinds and part.name not in self.allowed:
                raise InvalidRequest(
                    f"Unrecognized request argument supplied: {part.name}", param=part.name, code="unknown_parameter"
                )
            return
        part.filename = raw_filename.decode("utf-8", "replace").replace("\\", "/").rsplit("/", 1)[-1] or "file"
        if part.name not in self.allowed:
            raise InvalidRequest(
                f"The field `{part.name}` does not take a file.", param=part.name, code="unknown_parameter"
            )
        if sum(len(v) for v in self.form.files.values()) >= MAX_FILES:
            raise InvalidRequest(f"The form has more than {MAX_FILES} files.", code="invalid_multipart")
        fd, name = tempfile.mkstemp(prefix="upload-", dir=self.dir)
        part.path = Path(name)
        part.out = os.fdopen(fd, "wb")
        self.form.files.setdefault(part.name, []).append(UploadedFile(part.path, part.filename, "", 0))

    def _data(self, data: bytes) -> list[bytes]:
        """Text is gathered (bounded); a file's bytes are returned to be written, its head checked first."""
        part = self.part
        if part.filename is None:
            part.text += data
            if len(part.text) > MAX_FIELD_BYTES:
                raise PayloadTooLarge(f"The field `{part.name}` is larger than {MAX_FIELD_BYTES} bytes.")
            return []
        part.size += len(data)
        if len(part.head) < HEAD_BYTES:
            part.head += data[: HEAD_BYTES - len(part.head)]
            if len(part.head) >= HEAD_BYTES:
                self._check(part)
        return [data]

    def _check(self, part: _Part) -> str:
        allowed = self.allowed[part.name]
        if allowed == ANY_TYPE:
            return canonical(part.declared) or "application/octet-stream"
        found, problem = verdict(part.head, part.declared, allowed)
        if problem == "mismatch":
            raise InvalidRequest(
                f"The file `{part.filename}` was sent as {part.declared} but its content is {found}.",
                param=part.name,
                code="invalid_file_type",
            )
        if problem is not None:
            raise UnsupportedMediaType(
                f"The file `{part.filename}` ({found}) is not a supported format for `{part.name}`: "
                f"send one of {', '.join(sorted(allowed))}.",
                param=part.name,
                code="unsupported_file_type",
            )
        return found

    async def _write(self, pending: list[bytes]) -> None:
        out = self.part.out
        if out is not None:
            await anyio.to_thread.run_sync(out.write, b"".join(pending))

    async def _end_part(self) -> None:
        part = self.part
        if part.filename is None:
            self._text(part)
            return
        assert part.out is not None and part.path is not None
        await anyio.to_thread.run_sync(part.out.close)
        if part.size == 0:
            raise InvalidRequest(f"The file `{part.filename}` is empty.", param=part.name, code="empty_file")
        kind = self._check(part)
        files = self.form.files[part.name]
        files[-1] = UploadedFile(part.path, part.filename, kind, part.size)

    def _text(self, part: _Part) -> None:
        try:
            value = part.text.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRequest(f"The field `{part.name}` is not UTF-8 text.", param=part.name) from None
        kind = self.kinds.get(part.name, "str")
        fields = self.form.fields
        if kind == "list":
            fields.setdefault(part.name, []).append(value)
        else:
            fields[part.name] = _convert(part.name, value, kind)

    def abort(self) -> None:
        out = self.part.out
        if out is not None:
            with contextlib.suppress(OSError):
                out.close()
        self.form.close()


def _convert(name: str, value: str, kind: FieldKind) -> Any:
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "json":
            return json.loads(value)
    except ValueError:
        raise InvalidRequest(
            f"The field `{name}` is not a valid {kind}: {value[:50]!r}.", param=name, code="invalid_value"
        ) from None
    if kind == "bool":
        if value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise InvalidRequest(f"The field `{name}` is not a boolean: {value[:50]!r}.", param=name, code="invalid_value")
    return value


def _boundary(request: Request) -> bytes:
    content_type, params = parse_options_header(request.headers.get("content-type", ""))
    if content_type != b"multipart/form-data":
        raise UnsupportedMediaType(
            f"Unsupported content type {request.headers.get('content-type') or '(none)'!r}: "
            "send the body as multipart/form-data."
        )
    boundary = params.get(b"boundary")
    if not boundary:
        raise InvalidRequest("The multipart body has no boundary.", code="invalid_multipart")
    return boundary


def upload_dir_of(request: Request) -> str | None:
    media = getattr(getattr(request.app.state, "services", None), "media", None)
    found = getattr(media, "upload_dir", None)
    return None if found is None else str(found)


async def read_upload_form(
    request: Request,
    *,
    max_bytes: int,
    files: Mapping[str, set[str] | frozenset[str]],
    kinds: Mapping[str, FieldKind],
    dir: str | None = None,
) -> UploadForm:
    """The multipart body of `request`: its text fields converted by `kinds`, its files (only in the fields
    of `files`, each checked against that field's accepted types) on disk. 415 if the body is not
    multipart; 413 past `max_bytes` (reading stops there); 400 for a malformed body, an unknown field, a
    bad value, an empty file or a file whose bytes contradict its declared type; 415 for a format the field
    does not accept. Close the form (or use it as a context manager) to delete its files."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise PayloadTooLarge(f"The request body is larger than the limit of {max_bytes} bytes.")
    reader = _Reader(files, kinds, dir if dir is not None else upload_dir_of(request))
    parser = MultipartParser(_boundary(request), reader.callbacks())
    size = 0
    try:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                raise ClientDisconnect()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_bytes:
                raise PayloadTooLarge(f"The request body is larger than the limit of {max_bytes} bytes.")
            try:
                parser.write(chunk)
            except Exception as exc:  # python-multipart's parse errors
                raise InvalidRequest(f"The multipart body is malformed: {exc}", code="invalid_multipart") from None
            await reader.drain()
            if not message.get("more_body", False):
                break
        parser.finalize()
        await reader.drain()
        if reader.part.out is not None and not reader.part.out.closed:
            raise InvalidRequest("The multipart body ends inside a file.", code="invalid_multipart")
    except BaseException:
        reader.abort()
        raise
    return reader.form
