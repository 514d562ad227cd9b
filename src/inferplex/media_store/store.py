"""`MediaStore` (`services.media`): the gateway's files, their metadata rows, signed download URLs, retention.

Every file is written as a stream to the configured backend (disk or S3; never whole in memory), then
recorded in `media_files`; a file is read back as a stream, a byte range at a time. A provider's URL is
fetched by the gateway (with the deployment's key where the provider needs one) and stored the same way, so
a caller only ever sees the gateway's own signed, expiring URL. Files past their time are deleted, bytes
and row, by `sweep`, which runs every `media.sweep_interval_s` while the gateway runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
from starlette.responses import Response

from inferplex.auth import Principal
from inferplex.config import Config, MediaConfig
from inferplex.errors import PayloadTooLarge, UpstreamError, UpstreamTimeout
from inferplex.media_store.blobs import CHUNK, Blobs, DiskBlobs, TooLarge, read_file
from inferplex.media_store.download import file_response, parse_range
from inferplex.media_store.fetch import Fetcher
from inferplex.media_store.files import FileRows, Placed, StoredFile
from inferplex.media_store.signing import Signer, load_key
from inferplex.media_store.uploads import UploadedFile
from inferplex.store.backend import Database

log = logging.getLogger("inferplex")

ROUTE = "/v1/media/"
_STALE_S = 24 * 3600.0  # an upload's temporary file, or a write's `.part`, older than this is left over
_SWEEP_BATCH = 200


def owner_of(principal: Principal) -> str:
    """Whose a file is: the caller's account, else its key (the master key's id is `master`)."""
    return principal.account_id or principal.key_id


def media_dir(config: Config) -> Path:
    return Path(config.media.dir or Path(config.server.data_dir) / "media")


def _new_id() -> str:
    return "file-" + secrets.token_hex(12)


class MediaStore:
    def __init__(
        self, config: MediaConfig, rows: FileRows, blobs: Blobs, signer: Signer, base_url: str, upload_dir: Path
    ) -> None:
        self.config = config
        self.rows = rows
        self.blobs = blobs
        self.signer = signer
        self.base_url = base_url.rstrip("/")
        self.upload_dir = upload_dir
        self.max_upload_bytes = config.max_upload_bytes
        self._fetcher = Fetcher(config.fetch_timeout_s)
        self._sweeper: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, config: Config, db: Database) -> MediaStore:
        """The store `config.media` describes, on `db` (migrated), without its periodic sweep."""
        media = config.media
        root = media_dir(config)
        blobs: Blobs
        if media.backend == "s3":
            assert media.s3 is not None  # MediaConfig's validator
            from inferplex.media_store.s3 import S3Blobs  # the `s3` extra: imported only when configured

            blobs = await S3Blobs.open(media.s3)
        else:
            blobs = DiskBlobs(root)
        key = media.signing_key.get_secret_value() if media.signing_key else None
        signer = Signer(load_key(key, config.server.data_dir))
        uploads = root / "uploads"
        uploads.mkdir(parents=True, exist_ok=True)
        return cls(media, FileRows(db), blobs, signer, _base_url(config), uploads)

    @classmethod
    async def start(cls, config: Config, db: Database) -> MediaStore:
        """`open`, with the retention sweep running every `media.sweep_interval_s` until `aclose`."""
        store = await cls.open(config, db)
        store._sweeper = asyncio.create_task(store._sweep_forever(), name="media-sweep")
        return store

    # ---- writing ---------------------------------------------------------------------------------------

    async def save(
        self,
        owner: str,
        chunks: AsyncIterable[bytes],
        *,
        filename: str,
        content_type: str,
        purpose: str,
        ttl_s: float | None = None,
        max_bytes: int | None = None,
    ) -> StoredFile:
        """Stream `chunks` into the store as a new file; 413 (`PayloadTooLarge`) past `max_bytes`, nothing kept.
        It expires `ttl_s` from now (None: `media.retention_s`, which may be None: kept)."""
        try:
            return await self._save(owner, chunks, filename, content_type, purpose, ttl_s, max_bytes)
        except TooLarge as exc:
            raise PayloadTooLarge(f"The file is larger than the limit of {exc.limit} bytes.") from None

    async def save_bytes(
        self,
        owner: str,
        data: bytes,
        *,
        filename: str,
        content_type: str,
        purpose: str,
        ttl_s: float | None = None,
        max_bytes: int | None = None,
    ) -> StoredFile:
        return await self.save(
            owner,
            _one(data),
            filename=filename,
            content_type=content_type,
            purpose=purpose,
            ttl_s=ttl_s,
            max_bytes=max_bytes,
        )

    async def save_upload(
        self, owner: str, upload: UploadedFile, *, purpose: str = "upload", ttl_s: float | None = None
    ) -> StoredFile:
        """Keep an upload (a video's reference image, say) beyond its request: a stored file of its own."""
        return await self.save(
            owner,
            read_file(upload.path),
            filename=upload.filename,
            content_type=upload.content_type,
            purpose=purpose,
            ttl_s=ttl_s,
        )

    async def _save(
        self,
        owner: str,
        chunks: AsyncIterable[bytes],
        filename: str,
        content_type: str,
        purpose: str,
        ttl_s: float | None,
        max_bytes: int | None,
    ) -> StoredFile:
        file_id = _new_id()
        size = await self.blobs.put(file_id, chunks, max_bytes)
        now = time.time()
        ttl = self.config.retention_s if ttl_s is None else ttl_s
        file = StoredFile(
            file_id,
            owner,
            filename[:255] or "file",
            content_type[:200],
            size,
            purpose[:40],
            now,
            None if ttl is None else now + ttl,
        )
        try:
            await self.rows.add(Placed(file, self.blobs.name, file_id))
        except BaseException:
            with contextlib.suppress(Exception):
                await self.blobs.delete(file_id)
            raise
        return file

    async def fetch_to_store(
        self,
        url: str,
        headers: dict[str, str],
        owner: str,
        *,
        filename: str,
        purpose: str,
        content_type: str | None = None,
        ttl_s: float | None = None,
        max_bytes: int | None = None,
        public_only: bool = False,
    ) -> StoredFile:
        """GET a provider's `url` (with `headers`, e.g. the deployment's key) and stream it into the store.
        Its type is `content_type`, else what the provider answered. A failure is the provider's: 502 (504
        on a timeout), as is a file past `max_bytes` (default `media.max_fetch_bytes`). `public_only`: a URL
        from a source the operator does not vouch for may reach public addresses only (media_store/fetch.py)."""
        limit = max_bytes or self.config.max_fetch_bytes
        try:
            async with self._fetcher.get(url, headers, public_only) as answer:
                if answer.status >= 400:
                    message = f"Fetching the provider's file failed: HTTP {answer.status}."
                    raise UpstreamError(message, upstream_status=answer.status)
                declared = answer.content_length
                if declared is not None and declared > limit:
                    raise TooLarge(limit)
                kind = content_type or answer.headers.get("content-type") or "application/octet-stream"
                chunks = answer.content.iter_chunked(CHUNK)
                return await self._save(owner, chunks, filename, kind.split(";")[0].strip(), purpose, ttl_s, limit)
        except TooLarge as exc:
            raise UpstreamError(f"The provider's file is larger than the limit of {exc.limit} bytes.") from None
        except TimeoutError:
            raise UpstreamTimeout("Fetching the provider's file timed out.") from None
        except aiohttp.ClientError as exc:
            raise UpstreamError(f"Fetching the provider's file failed: {type(exc).__name__}.") from None

    # ---- reading ---------------------------------------------------------------------------------------

    async def get(self, file_id: str, owner: str | None = None) -> StoredFile | None:
        """The file, if it exists, has not expired, is in this store's backend and (given `owner`) is theirs."""
        if not file_id.startswith("file-") or len(file_id) > 40:
            return None
        placed = await self.rows.get(file_id)
        if placed is None or placed.backend != self.blobs.name:
            return None
        file = placed.file
        if file.expires_at is not None and file.expires_at <= time.time():
            return None
        return file if owner is None or file.owner == owner else None

    async def page(
        self, owner: str, purposes: frozenset[str], after: StoredFile | None, limit: int, *, descending: bool = True
    ) -> tuple[list[StoredFile], bool]:
        """`owner`'s unexpired files of `purposes`, `limit` of them after the file `after` (in creation order,
        newest first if `descending`), and whether more follow."""
        found = await self.rows.page(owner, purposes, self.blobs.name, time.time(), after, limit + 1, descending)
        return [p.file for p in found[:limit]], len(found) > limit

    def read(self, file: StoredFile, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
        """The file's bytes `[start, end)` (`end` None: to the end), as a stream of chunks."""
        return self.blobs.get(file.id, start, end)

    def download_response(self, file: StoredFile, range_header: str | None, *, head: bool = False) -> Response:
        """The file as an HTTP answer (200, 206 for a byte range, 416), streamed; headers only for a HEAD."""
        span = parse_range(range_header, file.bytes)
        chunks = None
        if not head and span != (-1, -1):
            chunks = self.read(file) if span is None else self.read(file, span[0], span[1] + 1)
        max_age = int(file.expires_at - time.time()) if file.expires_at is not None else 86400
        return file_response(file, chunks, span, min(max_age, 86400))

    # ---- URLs --------------------------------------------------------------------------------------------

    def url(self, file: StoredFile, ttl_s: float | None = None, *, base_url: str | None = None) -> str:
        """The gateway's signed download URL of `file`, valid `ttl_s` (default `media.url_ttl_s`; never past
        the file's own expiry). Absolute: `media.public_base_url`, else `base_url` (a route passes its
        request's), else the server's configured host and port."""
        expires = int(time.time() + (self.config.url_ttl_s if ttl_s is None else ttl_s))
        if file.expires_at is not None:
            expires = min(expires, int(file.expires_at))
        query = urlencode({"expires": expires, "signature": self.signer.signature(file.id, expires)})
        base = self.config.public_base_url or base_url or self.base_url
        return f"{base.rstrip('/')}{ROUTE}{file.id}?{query}"

    # ---- deleting ----------------------------------------------------------------------------------------

    async def delete(self, file_id: str) -> bool:
        placed = await self.rows.get(file_id)
        if placed is None:
            return False
        return await self._remove(placed)

    async def _remove(self, placed: Placed) -> bool:
        """Bytes first, then the row: a failure leaves the row, so the next sweep tries again."""
        if placed.backend == self.blobs.name:
            await self.blobs.delete(placed.location)
        return await self.rows.remove(placed.file.id)

    async def sweep(self, now: float | None = None) -> int:
        """Delete every file past its time (bytes and row), and left-over temporary files; how many files."""
        now = time.time() if now is None else now
        removed = 0
        while True:
            batch = await self.rows.expired(now, _SWEEP_BATCH)
            for placed in batch:
                try:
                    removed += await self._remove(placed)
                except Exception as exc:
                    log.warning("media sweep: could not delete %s (%s); retried next sweep", placed.file.id, exc)
                    return removed
            if len(batch) < _SWEEP_BATCH:
                break
        await asyncio.to_thread(_remove_stale, self.upload_dir, self.blobs, now - _STALE_S)
        return removed

    async def _sweep_forever(self) -> None:
        while True:
            try:
                removed = await self.sweep()
                if removed:
                    log.info("media sweep: deleted %d expired files", removed)
            except Exception:
                log.exception("media sweep failed; trying again in %.0f s", self.config.sweep_interval_s)
            await asyncio.sleep(self.config.sweep_interval_s)

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self._fetcher.aclose()
        await self.blobs.aclose()


async def _one(data: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(data), 1024 * 1024):
        yield data[i : i + 1024 * 1024]
    if not data:
        yield b""


def _remove_stale(upload_dir: Path, blobs: Any, before: float) -> None:
    """Uploads' temporary files, and a disk backend's unfinished `.part` files, older than `before`."""
    candidates = list(upload_dir.glob("*"))
    if isinstance(blobs, DiskBlobs):
        candidates += list(blobs.root.glob("*/.*.part"))
    for path in candidates:
        with contextlib.suppress(OSError):
            if path.is_file() and path.stat().st_mtime < before:
                path.unlink()


def _base_url(config: Config) -> str:
    host = config.server.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{config.server.port}"
