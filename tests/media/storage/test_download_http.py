"""The signed download route through a real gateway: valid, expired and tampered URLs, ranges, HEAD, and a
file that is gone (deleted, or swept past its retention). The test writes files through a store of its own
on the gateway's data directory, database and signing key, as a second replica sharing the store would."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from inferplex.config import parse_config
from inferplex.media_store.store import MediaStore
from inferplex.store.engine import default_url, open_database
from tests.gateway_server import GatewayServer


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("media-gw")


@pytest.fixture(scope="module")
def gateway(data_dir: Path) -> Iterator[GatewayServer]:
    with GatewayServer({"server": {"data_dir": str(data_dir)}}) as server:
        yield server


@pytest.fixture
async def replica(gateway: GatewayServer, data_dir: Path) -> AsyncIterator[MediaStore]:
    config = parse_config({"server": {"data_dir": str(data_dir)}}, "<test>")
    db = open_database(default_url(str(data_dir)))
    await db.migrate()
    store = await MediaStore.open(config, db)
    yield store
    await store.aclose()
    await db.aclose()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


def _error(r: httpx.Response, status: int, code: str) -> None:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == code, body
    assert set(body["error"]) == {"message", "type", "param", "code"}


async def test_a_signed_url_answers_the_file(
    http: httpx.AsyncClient, gateway: GatewayServer, replica: MediaStore
) -> None:
    data = os.urandom(300_000)
    saved = await replica.save_bytes("acct", data, filename="photo é.png", content_type="image/png", purpose="image")
    url = replica.url(saved, base_url=gateway.url)
    assert url.startswith(gateway.url + "/v1/media/" + saved.id + "?")
    r = await http.get(url)
    assert r.status_code == 200 and r.content == data
    assert r.headers["content-type"] == "image/png"
    assert r.headers["content-length"] == str(len(data))
    assert r.headers["accept-ranges"] == "bytes"
    assert r.headers["content-disposition"] == "inline; filename=\"photo e.png\"; filename*=UTF-8''photo%20%C3%A9.png"
    assert r.headers["x-content-type-options"] == "nosniff"
    head = await http.head(url)
    assert head.status_code == 200 and head.content == b"" and head.headers["content-length"] == str(len(data))


async def test_ranges(http: httpx.AsyncClient, gateway: GatewayServer, replica: MediaStore) -> None:
    data = os.urandom(200_000)
    saved = await replica.save_bytes("acct", data, filename="a.mp3", content_type="audio/mpeg", purpose="audio")
    url = replica.url(saved, base_url=gateway.url)
    r = await http.get(url, headers={"Range": "bytes=1000-70999"})
    assert r.status_code == 206 and r.content == data[1000:71000]
    assert r.headers["content-range"] == f"bytes 1000-70999/{len(data)}"
    assert r.headers["content-length"] == "70000"
    r = await http.get(url, headers={"Range": "bytes=-100"})
    assert r.status_code == 206 and r.content == data[-100:]
    r = await http.get(url, headers={"Range": f"bytes={len(data)}-"})
    _error(r, 416, "range_not_satisfiable")
    assert r.headers["content-range"] == f"bytes */{len(data)}"
    r = await http.get(url, headers={"Range": "bytes=0-1,5-6"})  # several ranges: the whole file
    assert r.status_code == 200 and r.content == data


async def test_bad_and_expired_signatures_are_403(
    http: httpx.AsyncClient, gateway: GatewayServer, replica: MediaStore
) -> None:
    saved = await replica.save_bytes("acct", b"secret", filename="s.txt", content_type="text/plain", purpose="upload")
    url = replica.url(saved, base_url=gateway.url)
    parts = urlsplit(url)
    q = {k: v[0] for k, v in parse_qs(parts.query).items()}
    base = f"{gateway.url}{parts.path}"
    sig = q["signature"]
    tampered = sig[:-2] + ("AA" if not sig.endswith("AA") else "BB")
    _error(await http.get(base, params={**q, "signature": tampered}), 403, "invalid_signature")
    _error(await http.get(base, params={**q, "expires": str(int(q["expires"]) + 3600)}), 403, "invalid_signature")
    _error(await http.get(base, params={"expires": q["expires"]}), 403, "invalid_signature")
    _error(await http.get(base), 403, "invalid_signature")
    other = await replica.save_bytes("acct", b"other", filename="o.txt", content_type="text/plain", purpose="upload")
    _error(await http.get(f"{gateway.url}/v1/media/{other.id}", params=q), 403, "invalid_signature")  # not its URL
    expired = replica.url(saved, ttl_s=-5, base_url=gateway.url)
    _error(await http.get(expired), 403, "url_expired")
    short = replica.url(saved, ttl_s=1, base_url=gateway.url)
    assert (await http.get(short)).status_code == 200
    await asyncio.sleep(1.2)
    _error(await http.get(short), 403, "url_expired")


async def test_a_file_gone_is_404(http: httpx.AsyncClient, gateway: GatewayServer, replica: MediaStore) -> None:
    deleted = await replica.save_bytes("acct", b"bye", filename="d.txt", content_type="text/plain", purpose="upload")
    url = replica.url(deleted, base_url=gateway.url)
    assert (await http.get(url)).status_code == 200
    assert await replica.delete(deleted.id)
    _error(await http.get(url), 404, "file_not_found")


async def test_an_expired_file_is_swept_and_its_url_404s(
    http: httpx.AsyncClient, gateway: GatewayServer, replica: MediaStore
) -> None:
    saved = await replica.save_bytes("acct", b"old", filename="o.txt", content_type="text/plain", purpose="upload",
                                     ttl_s=600)  # fmt: skip
    url = replica.url(saved, base_url=gateway.url)
    path = replica.blobs.path(saved.id)  # type: ignore[attr-defined]
    assert (await http.get(url)).status_code == 200 and path.exists()
    assert await replica.sweep(now=time.time() + 3600) >= 1
    assert not path.exists() and await replica.rows.get(saved.id) is None
    _error(await http.get(url), 404, "file_not_found")


async def test_the_gateway_sweeps_by_itself(http: httpx.AsyncClient, tmp_path: Path) -> None:
    """The lifespan's sweeper: a file that expires while the gateway runs is deleted within an interval."""
    config = {"server": {"data_dir": str(tmp_path)}, "media": {"sweep_interval_s": 0.2}}
    with GatewayServer(config) as server:
        store_config = parse_config(config, "<test>")
        db = open_database(default_url(str(tmp_path)))
        replica = await MediaStore.open(store_config, db)
        try:
            saved = await replica.save_bytes("a", b"brief", filename="b", content_type="text/plain", purpose="upload",
                                             ttl_s=0.3)  # fmt: skip
            path = replica.blobs.path(saved.id)  # type: ignore[attr-defined]
            deadline = time.monotonic() + 10
            while path.exists() or await replica.rows.get(saved.id) is not None:
                assert time.monotonic() < deadline, "the gateway did not sweep the expired file"
                await asyncio.sleep(0.1)
            far = int(time.time()) + 60  # the store's own URLs end with the file: sign one past it
            query = {"expires": str(far), "signature": replica.signer.signature(saved.id, far)}
            _error(await http.get(f"{server.url}/v1/media/{saved.id}", params=query), 404, "file_not_found")
        finally:
            await replica.aclose()
            await db.aclose()


async def test_unknown_and_malformed_ids(http: httpx.AsyncClient, gateway: GatewayServer, replica: MediaStore) -> None:
    for file_id in ("file-nope", "x" * 300, "..%2F..%2Fetc%2Fpasswd"):
        far = str(int(time.time()) + 60)
        sig = replica.signer.signature(file_id, int(far))
        r = await http.get(f"{gateway.url}/v1/media/{file_id}", params={"expires": far, "signature": sig})
        assert r.status_code in (403, 404), r.text
        assert r.json()["error"]["code"] in ("file_not_found", "invalid_signature", "unknown_route")
