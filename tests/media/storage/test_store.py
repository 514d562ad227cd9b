"""The media store itself, on each backend (disk, moto's S3 server) with its rows on each engine (SQLite,
PostgreSQL): streamed writes, reads and ranges, owners, deletion, the retention sweep, size limits, and a
provider's URL fetched into the store."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from inferplex.errors import PayloadTooLarge, UpstreamError
from inferplex.media_store.blobs import DiskBlobs
from inferplex.media_store.store import MediaStore
from tests.media.storage.conftest import FileHost, s3_client


async def pieces(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def read_all(it: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in it])


async def test_a_streamed_file_reads_back_whole_and_by_range(store: MediaStore) -> None:
    data = os.urandom(3 * 1024 * 1024 + 17)  # several chunks, not a multiple of any
    parts = [data[i : i + 100_000] for i in range(0, len(data), 100_000)]
    saved = await store.save("acct-1", pieces(*parts), filename="cat.png", content_type="image/png", purpose="image")
    assert saved.id.startswith("file-") and saved.bytes == len(data)
    assert (saved.owner, saved.filename, saved.content_type, saved.purpose) == (
        "acct-1",
        "cat.png",
        "image/png",
        "image",
    )
    assert saved.expires_at == pytest.approx(saved.created_at + 7 * 86400)
    assert await store.get(saved.id) == saved
    assert await read_all(store.read(saved)) == data
    for start, end in [(0, 1), (5, 70_000), (65_536, 65_537), (len(data) - 10, None), (1_000_000, 2_500_000)]:
        assert await read_all(store.read(saved, start, end)) == data[start:end]


async def test_a_large_write_to_s3_is_a_multipart_upload_and_reads_back(store: MediaStore) -> None:
    chunk = os.urandom(1024 * 1024)
    digest = hashlib.sha256(chunk * 20).hexdigest()
    saved = await store.save("o", pieces(*([chunk] * 20)), filename="v.mp4", content_type="video/mp4", purpose="video")
    assert saved.bytes == 20 * len(chunk)
    got = hashlib.sha256()
    async for piece in store.read(saved):
        assert len(piece) <= 1024 * 1024
        got.update(piece)
    assert got.hexdigest() == digest


async def test_owner_filter_and_unknown_ids(store: MediaStore) -> None:
    saved = await store.save_bytes("alice", b"hello", filename="a.txt", content_type="text/plain", purpose="upload")
    assert await store.get(saved.id, owner="alice") == saved
    assert await store.get(saved.id, owner="bob") is None
    for bad in ("file-doesnotexist", "nope", "../../etc/passwd", "file-" + "a" * 100):
        assert await store.get(bad) is None


async def test_delete_removes_the_bytes_and_the_row(store: MediaStore, tmp_path: Path) -> None:
    saved = await store.save_bytes("o", b"x" * 1000, filename="x.bin", content_type="application/octet-stream",
                                   purpose="upload")  # fmt: skip
    assert await store.delete(saved.id) is True
    assert await store.get(saved.id) is None
    assert await store.delete(saved.id) is False
    assert not _blob_exists(store, saved.id)


async def test_a_file_past_its_limit_is_refused_and_leaves_nothing(store: MediaStore) -> None:
    with pytest.raises(PayloadTooLarge) as caught:
        await store.save("o", pieces(b"a" * 600, b"b" * 600), filename="big", content_type="image/png",
                         purpose="image", max_bytes=1000)  # fmt: skip
    assert caught.value.status == 413
    assert _blob_count(store) == 0


async def test_the_sweep_deletes_expired_files_with_their_bytes(store: MediaStore) -> None:
    short = await store.save_bytes("o", b"short", filename="s", content_type="text/plain", purpose="upload", ttl_s=60)
    kept = await store.save_bytes("o", b"kept", filename="k", content_type="text/plain", purpose="upload")
    assert await store.sweep(now=time.time() + 30) == 0
    assert await store.sweep(now=time.time() + 120) == 1
    assert await store.get(short.id) is None and not _blob_exists(store, short.id)
    assert await store.get(kept.id) == kept and _blob_exists(store, kept.id)
    assert await store.rows.get(short.id) is None


async def test_an_expired_file_is_gone_before_the_sweep_runs(store: MediaStore) -> None:
    saved = await store.save_bytes("o", b"z", filename="z", content_type="text/plain", purpose="upload", ttl_s=0.01)
    await asyncio.sleep(0.05)
    assert await store.get(saved.id) is None


async def test_a_providers_url_is_fetched_with_its_key(store: MediaStore, file_host: FileHost) -> None:
    data = os.urandom(200_000)
    file_host.files["img-1.png"] = data
    headers = {"Authorization": f"Bearer {file_host.key}"}
    saved = await store.fetch_to_store(file_host.url + "/img-1.png", headers, "acct", filename="image.png",
                                       purpose="image")  # fmt: skip
    assert saved.content_type == "image/png" and saved.bytes == len(data)
    assert await read_all(store.read(saved)) == data
    with pytest.raises(UpstreamError) as caught:
        await store.fetch_to_store(file_host.url + "/img-1.png", {}, "acct", filename="i.png", purpose="image")
    assert caught.value.upstream_status == 401
    with pytest.raises(UpstreamError) as caught:  # declared too large: refused before reading
        await store.fetch_to_store(file_host.url + "/img-1.png", headers, "acct", filename="i.png", purpose="image",
                                   max_bytes=1000)  # fmt: skip
    with pytest.raises(UpstreamError):  # no length declared: stopped while streaming
        await store.fetch_to_store(file_host.url + "/endless/100", headers, "acct", filename="v.mp4",
                                   purpose="video", max_bytes=1_000_000)  # fmt: skip
    assert "larger than the limit" in caught.value.message
    assert _blob_count(store) == 1  # only the first, good one


def _blob_exists(store: MediaStore, file_id: str) -> bool:
    if isinstance(store.blobs, DiskBlobs):
        return store.blobs.path(file_id).exists()
    s3 = s3_client(store.blobs._client.meta.endpoint_url)  # type: ignore[attr-defined]
    found = s3.list_objects_v2(Bucket=store.blobs.bucket, Prefix="gw/" + file_id)  # type: ignore[attr-defined]
    return bool(found.get("KeyCount"))


def _blob_count(store: MediaStore) -> int:
    if isinstance(store.blobs, DiskBlobs):
        return sum(1 for p in store.blobs.root.glob("*/*") if p.is_file())
    s3 = s3_client(store.blobs._client.meta.endpoint_url)  # type: ignore[attr-defined]
    found = s3.list_objects_v2(Bucket=store.blobs.bucket)  # type: ignore[attr-defined]
    uploads = s3.list_multipart_uploads(Bucket=store.blobs.bucket)  # type: ignore[attr-defined]
    return int(found.get("KeyCount", 0)) + len(uploads.get("Uploads", []))


async def test_redirects_keep_the_key_on_the_same_host_only(store: MediaStore, file_host: FileHost) -> None:
    file_host.files["moved.png"] = b"moved"
    headers = {"Authorization": f"Bearer {file_host.key}"}
    saved = await store.fetch_to_store(file_host.url + "/moved/moved.png", headers, "o", filename="m", purpose="image")
    assert await read_all(store.read(saved)) == b"moved"
    file_host.seen.clear()
    with pytest.raises(UpstreamError) as caught:
        await store.fetch_to_store(file_host.url + "/elsewhere/moved.png", headers, "o", filename="m", purpose="image")
    assert caught.value.upstream_status == 401
    assert file_host.seen and "Authorization" not in file_host.seen[-1]


async def test_public_only_refuses_internal_addresses(store: MediaStore, file_host: FileHost) -> None:
    file_host.files["p.png"] = b"p"
    headers = {"Authorization": f"Bearer {file_host.key}"}
    for url in (file_host.url + "/p.png", f"http://localhost:{file_host.port}/p.png", "file:///etc/passwd"):
        with pytest.raises(UpstreamError) as caught:
            await store.fetch_to_store(url, headers, "o", filename="p", purpose="image", public_only=True)
        assert caught.value.code == "media_url_refused", caught.value.message
    with pytest.raises(UpstreamError) as caught:  # the file host's address is not the problem without it
        await store.fetch_to_store("file:///etc/passwd", headers, "o", filename="p", purpose="image")
    assert caught.value.code == "media_url_refused"


async def test_an_upload_kept_as_a_stored_file(store: MediaStore, tmp_path: Path) -> None:
    from inferplex.media_store.uploads import UploadedFile

    data = os.urandom(150_000)
    path = tmp_path / "upload-x"
    path.write_bytes(data)
    saved = await store.save_upload("o", UploadedFile(path, "ref.png", "image/png", len(data)), purpose="video")
    assert (saved.filename, saved.content_type, saved.bytes, saved.purpose) == (
        "ref.png",
        "image/png",
        len(data),
        "video",
    )
    assert await read_all(store.read(saved)) == data
