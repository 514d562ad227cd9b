"""Fixtures for the media store: a real S3 server (moto's server mode, in a process of its own on 127.0.0.1),
a store on each backend (disk, s3) and each metadata engine (SQLite, PostgreSQL), a gateway serving the
download route, and a small HTTP server standing for a provider's file host."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from aiohttp import web

from inferplex.config import Config, parse_config
from inferplex.media_store.store import MediaStore
from inferplex.store.backend import Database
from tests.accounts import conftest as accounts
from tests.fakes.moto_server import moto_server
from tests.fakes.server import BackgroundServer

S3_KEY_ID = "testing-key-id"
S3_SECRET = "testing-secret-key"


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    """moto's S3 server for the whole session."""
    with moto_server() as url:
        yield url


def s3_client(moto_url: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=moto_url,
        region_name="us-east-1",
        aws_access_key_id=S3_KEY_ID,
        aws_secret_access_key=S3_SECRET,
    )


@pytest.fixture
def bucket(moto_url: str) -> str:
    name = "media-" + secrets.token_hex(6)
    s3_client(moto_url).create_bucket(Bucket=name)
    return name


def media_config(tmp: Path, backend: str, moto: str | None = None, bucket: str | None = None, **media: Any) -> Config:
    section: dict[str, Any] = {"backend": backend, **media}
    if backend == "s3":
        section["s3"] = {
            "endpoint_url": moto,
            "bucket": bucket,
            "access_key_id": "env:IPX_TEST_S3_KEY_ID",
            "secret_access_key": "env:IPX_TEST_S3_SECRET",
            "prefix": "gw/",
        }
    return parse_config({"server": {"data_dir": str(tmp)}, "media": section}, "<test>")


@pytest.fixture(autouse=True)
def _s3_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IPX_TEST_S3_KEY_ID", S3_KEY_ID)
    monkeypatch.setenv("IPX_TEST_S3_SECRET", S3_SECRET)


# The accounts' fixtures, used here: `migrated_db` (a migrated database on each engine) and its `pg_url`.
migrated_db = accounts.migrated_db
pg_url = accounts.pg_url


@pytest.fixture(params=["disk", "s3"])
async def store(request: pytest.FixtureRequest, migrated_db: Database, tmp_path: Path) -> AsyncIterator[MediaStore]:
    """A store on each backend, its rows on each engine (`migrated_db`: SQLite and PostgreSQL)."""
    if request.param == "s3":
        moto = request.getfixturevalue("moto_url")
        config = media_config(tmp_path, "s3", moto, request.getfixturevalue("bucket"))
    else:
        config = media_config(tmp_path, "disk")
    media = await MediaStore.open(config, migrated_db)
    yield media
    await media.aclose()


class FileHost:
    """A provider's file host: serves `files[path]` to a request bearing `key`, 401 otherwise, and can
    claim a Content-Length or stream endlessly to test the store's limits."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.files: dict[str, bytes] = {}
        self.seen: list[dict[str, str]] = []
        routes = [
            web.get("/{name}", self._serve),
            web.get("/endless/{n}", self._endless),
            web.get("/moved/{name}", self._moved),
            web.get("/elsewhere/{name}", self._elsewhere),
        ]
        self._server = BackgroundServer(routes, "file-host")
        self.port = 0

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(dict(request.headers))
        if request.headers.get("Authorization") != f"Bearer {self.key}":
            return web.json_response({"error": {"message": "bad key"}}, status=401)
        data = self.files.get(request.match_info["name"])
        if data is None:
            return web.json_response({"error": {"message": "no such file"}}, status=404)
        return web.Response(body=data, content_type="image/png")

    async def _moved(self, request: web.Request) -> web.StreamResponse:
        """A redirect on the same host: the key goes along."""
        raise web.HTTPFound(f"/{request.match_info['name']}")

    async def _elsewhere(self, request: web.Request) -> web.StreamResponse:
        """A redirect to another host name (the same server as `localhost`): the key must not follow."""
        raise web.HTTPFound(f"http://localhost:{self.port}/{request.match_info['name']}")

    async def _endless(self, request: web.Request) -> web.StreamResponse:
        """Chunked, no Content-Length: `n` chunks of 64 KiB."""
        resp = web.StreamResponse()
        resp.content_type = "video/mp4"
        await resp.prepare(request)
        for _ in range(int(request.match_info["n"])):
            await resp.write(b"\0" * 65536)
        await resp.write_eof()
        return resp

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FileHost:
        self.port = self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()


@pytest.fixture(scope="module")
def file_host() -> Iterator[FileHost]:
    host = FileHost("sk-provider-key").start()
    yield host
    host.stop()
