"""Where a stored file's bytes live: the `Blobs` interface, and its disk implementation (the default).

A backend writes a stream of chunks under a key, never holding more than a chunk or two in memory, and
stops at a size limit (`TooLarge`) leaving nothing behind; it reads a byte range back as a stream. The disk
backend writes to a temporary file beside the target and renames it into place when complete, so a reader
never sees half a file, and a crash leaves only a `.part` file (removed by the sweep).
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import AsyncIterable, AsyncIterator
from pathlib import Path
from typing import BinaryIO, Protocol

CHUNK = 64 * 1024  # what a read yields at a time
_WRITE_BATCH = 1024 * 1024  # what a write gathers before one trip to the file thread


class TooLarge(Exception):
    """The stream passed the size limit it was written with; nothing was kept."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than {limit} bytes")
        self.limit = limit


class Blobs(Protocol):
    """A place for files' bytes, by key. `get` reads `[start, end)` (`end` None: to the end)."""

    name: str

    async def put(self, key: str, chunks: AsyncIterable[bytes], max_bytes: int | None) -> int: ...

    def get(self, key: str, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]: ...

    async def delete(self, key: str) -> None: ...

    async def aclose(self) -> None: ...


def _write_all(f: BinaryIO, parts: list[bytes]) -> None:
    for part in parts:
        f.write(part)


class DiskBlobs:
    """Files under `root`, each at `<2 hex>/<key>` (a few hundred per directory even with many files)."""

    name = "disk"

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        if not key or "/" in key or "\\" in key or key.startswith("."):
            raise ValueError(f"not a blob key: {key!r}")
        return self.root / key[-2:] / key

    async def put(self, key: str, chunks: AsyncIterable[bytes], max_bytes: int | None) -> int:
        target = self.path(key)
        target.parent.mkdir(exist_ok=True)
        temp = target.with_name(f".{key}.{secrets.token_hex(4)}.part")
        f = await asyncio.to_thread(open, temp, "xb")
        size = 0
        try:
            batch: list[bytes] = []
            held = 0
            async for chunk in chunks:
                size += len(chunk)
                if max_bytes is not None and size > max_bytes:
                    raise TooLarge(max_bytes)
                batch.append(chunk)
                held += len(chunk)
                if held >= _WRITE_BATCH:
                    await asyncio.to_thread(_write_all, f, batch)
                    batch, held = [], 0
            await asyncio.to_thread(_write_all, f, batch)
            await asyncio.to_thread(f.close)
            await asyncio.to_thread(os.replace, temp, target)
        except BaseException:
            f.close()
            temp.unlink(missing_ok=True)
            raise
        return size

    def get(self, key: str, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
        return read_file(self.path(key), start, end)

    async def delete(self, key: str) -> None:
        await asyncio.to_thread(self.path(key).unlink, True)

    async def aclose(self) -> None:
        return None


async def read_file(path: Path, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
    """The bytes `[start, end)` of the file at `path`, in `CHUNK`s, each read on a thread."""
    f = await asyncio.to_thread(open, path, "rb")
    try:
        if start:
            await asyncio.to_thread(f.seek, start)
        left = None if end is None else end - start
        while left is None or left > 0:
            chunk = await asyncio.to_thread(f.read, CHUNK if left is None else min(CHUNK, left))
            if not chunk:
                return
            if left is not None:
                left -= len(chunk)
            yield chunk
    finally:
        f.close()
