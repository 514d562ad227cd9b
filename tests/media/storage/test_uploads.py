"""Multipart uploads read by media_store/uploads.py, through a real HTTP server and a small route that
reports what it was handed: fields converted, files on disk with their checked types, the size limit
enforced while the body streams in (before the client has finished sending), type mismatches refused, and
the temporary files gone after the request, whatever its outcome."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.context import Context
from inferplex.edge import endpoint, json_response
from inferplex.errors import PayloadTooLarge
from inferplex.media_store.routes import render_error
from inferplex.media_store.sniff import AUDIO_TYPES, IMAGE_TYPES
from inferplex.media_store.uploads import read_upload_form
from tests.gateway_server import free_port
from tests.media.storage.test_units import MP3_FRAME, PNG, WAV

LIMIT = 1024 * 1024


class UploadApp:
    """A Starlette app with one upload route, served by uvicorn on 127.0.0.1 from a thread."""

    def __init__(self, upload_dir: Path) -> None:
        self.dir = upload_dir
        self.refused_at: list[float] = []  # when the route gave up on a body (monotonic)
        app = Starlette(
            routes=[
                Route("/upload", endpoint(render_error, self.upload, None), methods=["POST"]),
                Route("/forgetful", endpoint(render_error, self.forgetful, None), methods=["POST"]),
            ]
        )
        # what the gateway's routes find: the media store's upload directory on `services.media`
        app.state.services = SimpleNamespace(media=SimpleNamespace(upload_dir=upload_dir))
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    lifespan="off"))  # fmt: skip
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def upload(self, request: Request, ctx: Context) -> Response:
        try:
            form = await read_upload_form(
                request,
                max_bytes=LIMIT,
                files={"file": AUDIO_TYPES, "image": IMAGE_TYPES},
                kinds={"model": "str", "temperature": "float", "n": "int", "stream": "bool",
                       "timestamp_granularities": "list", "metadata": "json"},
                dir=str(self.dir),
            )  # fmt: skip
        except PayloadTooLarge:
            self.refused_at.append(time.monotonic())
            raise
        with form:
            files: dict[str, Any] = {
                name: [
                    {"filename": f.filename, "content_type": f.content_type, "bytes": f.bytes,
                     "sha256": hashlib.sha256(f.path.read_bytes()).hexdigest(), "in_dir": f.path.parent == self.dir}
                    for f in found
                ]
                for name, found in form.files.items()
            }  # fmt: skip
        return json_response({"fields": form.fields, "files": files})

    async def forgetful(self, request: Request, ctx: Context) -> Response:
        """A route that never closes its form: the files go when the form does, at the end of the request."""
        form = await read_upload_form(request, max_bytes=LIMIT, files={"file": AUDIO_TYPES}, kinds={})
        upload = form.file("file")
        assert upload is not None and upload.path.exists() and upload.path.parent == self.dir
        return json_response({"path": str(upload.path)})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/upload"

    def start(self) -> UploadApp:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UploadApp]:
    served = UploadApp(tmp_path_factory.mktemp("uploads")).start()
    yield served
    served.stop()


@pytest.fixture
async def http(app: UploadApp) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client
    assert list(app.dir.iterdir()) == [], "an upload's temporary file was left behind"


def _error(r: httpx.Response, status: int, code: str, param: str | None = None) -> None:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code, error
    if param is not None:
        assert error["param"] == param


async def test_fields_and_files_as_the_openai_sdk_sends_them(http: httpx.AsyncClient, app: UploadApp) -> None:
    wav = WAV + b"\1" * 5000
    data = {"model": "whisper-1", "temperature": "0.2", "n": "2", "stream": "false",
            "timestamp_granularities[]": ["word", "segment"], "metadata": '{"a": 1}'}  # fmt: skip
    files = [("file", ("speech.wav", wav, "audio/wav")), ("image[]", ("a.png", PNG, "image/png")),
             ("image[]", ("b.png", PNG + b"x", "application/octet-stream"))]  # fmt: skip
    r = await http.post(app.url, data=data, files=files)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["fields"] == {"model": "whisper-1", "temperature": 0.2, "n": 2, "stream": False,
                              "timestamp_granularities": ["word", "segment"], "metadata": {"a": 1}}  # fmt: skip
    assert body["files"]["file"] == [{"filename": "speech.wav", "content_type": "audio/wav", "bytes": len(wav),
                                      "sha256": hashlib.sha256(wav).hexdigest(), "in_dir": True}]  # fmt: skip
    assert [f["content_type"] for f in body["files"]["image"]] == ["image/png", "image/png"]
    assert [f["bytes"] for f in body["files"]["image"]] == [len(PNG), len(PNG) + 1]


async def test_a_file_in_many_small_pieces(http: httpx.AsyncClient, app: UploadApp) -> None:
    mp3 = MP3_FRAME + bytes(range(256)) * 1000

    async def body() -> AsyncIterator[bytes]:
        raw = (b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.mp3\"\r\n"
               b"Content-Type: audio/mpeg\r\n\r\n" + mp3 + b"\r\n--B--\r\n")  # fmt: skip
        for i in range(0, 406, 7):  # headers and the file's head across many pieces, then the rest
            yield raw[i : i + 7]
        for i in range(406, len(raw), 8192):
            yield raw[i : i + 8192]

    r = await http.post(app.url, content=body(), headers={"content-type": "multipart/form-data; boundary=B"})
    assert r.status_code == 200, r.text
    assert r.json()["files"]["file"][0]["sha256"] == hashlib.sha256(mp3).hexdigest()


@pytest.mark.parametrize(
    ("files", "data", "status", "code", "param"),
    [
        ({"file": ("a.wav", PNG, "audio/wav")}, {}, 400, "invalid_file_type", "file"),  # bytes contradict the type
        ({"file": ("a.png", PNG, "image/png")}, {}, 415, "unsupported_file_type", "file"),  # not an audio format
        ({"file": ("a.txt", b"hello there, not audio" * 4, "text/plain")}, {}, 415, "unsupported_file_type", "file"),
        ({"image": ("x.png", WAV + b"\0" * 100, "image/png")}, {}, 400, "invalid_file_type", "image"),
        ({"file": ("e.wav", b"", "audio/wav")}, {}, 400, "empty_file", "file"),
        ({"other": ("a.wav", WAV, "audio/wav")}, {}, 400, "unknown_parameter", "other"),
        ({"file": ("a.wav", WAV, "audio/wav")}, {"temperature": "hot"}, 400, "invalid_value", "temperature"),
        ({"file": ("a.wav", WAV, "audio/wav")}, {"stream": "maybe"}, 400, "invalid_value", "stream"),
        ({"file": ("a.wav", WAV, "audio/wav")}, {"unknown": "x"}, 400, "unknown_parameter", "unknown"),
        ({"file": ("a.wav", WAV, "audio/wav")}, {"metadata": "{not json"}, 400, "invalid_value", "metadata"),
    ],
)  # fmt: skip
async def test_refusals(
    http: httpx.AsyncClient, app: UploadApp, files: Any, data: Any, status: int, code: str, param: str
) -> None:
    _error(await http.post(app.url, files=files, data=data), status, code, param)


async def test_not_multipart_is_415(http: httpx.AsyncClient, app: UploadApp) -> None:
    _error(await http.post(app.url, json={"model": "x"}), 415, "unsupported_media_type")
    _error(await http.post(app.url, content=b"x", headers={"content-type": "multipart/form-data"}), 400,
           "invalid_multipart")  # fmt: skip
    r = await http.post(app.url, content=b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\n"
                        + WAV, headers={"content-type": "multipart/form-data; boundary=B"})  # fmt: skip
    _error(r, 400, "invalid_multipart")  # the body ends inside the file


async def test_a_declared_length_over_the_limit_is_refused_at_once(http: httpx.AsyncClient, app: UploadApp) -> None:
    r = await http.post(app.url, files={"file": ("big.wav", WAV + b"\0" * (2 * LIMIT), "audio/wav")})
    _error(r, 413, "request_too_large")


async def test_the_limit_is_enforced_while_the_body_streams(http: httpx.AsyncClient, app: UploadApp) -> None:
    """No Content-Length (chunked): the route stops reading at the limit, long before the client is done."""
    app.refused_at.clear()
    finished: list[float] = []

    async def body() -> AsyncIterator[bytes]:
        yield (b"--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.wav\"\r\n"
               b"Content-Type: audio/wav\r\n\r\n" + WAV)  # fmt: skip
        for _ in range(40):  # 40 x 128 KiB = 5 MiB over 2 s
            yield b"\0" * 131072
            await asyncio.sleep(0.05)
        yield b"\r\n--B--\r\n"
        finished.append(time.monotonic())

    r = await http.post(app.url, content=body(), headers={"content-type": "multipart/form-data; boundary=B"})
    _error(r, 413, "request_too_large")
    assert app.refused_at and finished and app.refused_at[0] < finished[0] - 1.0


async def test_a_form_nobody_closed_is_cleaned_up_after_the_request(http: httpx.AsyncClient, app: UploadApp) -> None:
    r = await http.post(app.url.replace("/upload", "/forgetful"), files={"file": ("a.wav", WAV, "audio/wav")})
    assert r.status_code == 200, r.text
    assert not await asyncio.to_thread(os.path.exists, r.json()["path"])
