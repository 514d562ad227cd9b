"""A large download keeps the gateway's memory flat: 200 MB through the signed URL of a gateway running as
its own process (`inferplex serve`), its resident memory sampled throughout, including while the client
stops reading for a while (the gateway must wait for it, not read the file ahead into memory)."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import psutil
import yaml

from inferplex.config import parse_config
from inferplex.media_store.store import MediaStore
from inferplex.store.engine import default_url, open_database
from tests.replicas import serve

MiB = 1024 * 1024
SIZE_MIB = 200
MASTER = "ipx-media-memory-master"


def _listener(port: int) -> psutil.Process:
    for conn in psutil.net_connections("tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            return psutil.Process(conn.pid)
    raise AssertionError(f"no process listens on {port}")


class Sampler:
    """The process's RSS every 20 ms, in a thread, until stopped."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc = proc
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            self._stop.wait(0.02)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


async def test_a_200_mb_download_keeps_the_gateways_memory_flat(tmp_path: Path) -> None:
    config = {"server": {"data_dir": str(tmp_path), "master_key": "env:IPX_MEDIA_MASTER"}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {**os.environ, "IPX_MEDIA_MASTER": MASTER}
    block = os.urandom(MiB)

    async def blocks() -> AsyncIterator[bytes]:
        for i in range(SIZE_MIB):
            yield i.to_bytes(4, "big") + block[4:]

    want = hashlib.sha256()
    for i in range(SIZE_MIB):
        want.update(i.to_bytes(4, "big") + block[4:])
    expected = want.hexdigest()
    with serve([path], env) as (base,):
        db = open_database(default_url(str(tmp_path)))
        mine = parse_config({"server": {"data_dir": str(tmp_path)}}, "<test>")
        store = await MediaStore.open(mine, db)  # the same files, rows and signing key
        try:
            big = await store.save("acct", blocks(), filename="big.mp4", content_type="video/mp4", purpose="video")
            small = await store.save_bytes("acct", block, filename="s.bin", content_type="video/mp4", purpose="video")
        finally:
            await store.aclose()
            await db.aclose()
        gateway = _listener(int(base.rsplit(":", 1)[1]))
        async with httpx.AsyncClient(timeout=60) as http:
            for _ in range(3):  # warm up every path a download takes
                assert (await http.get(store.url(small, base_url=base))).content == block
            baseline = gateway.memory_info().rss
            got = hashlib.sha256()
            with Sampler(gateway) as sampler:
                async with http.stream("GET", store.url(big, base_url=base)) as r:
                    assert r.status_code == 200
                    assert r.headers["content-length"] == str(SIZE_MIB * MiB)
                    received = 0
                    paused = False
                    async for chunk in r.aiter_bytes():
                        got.update(chunk)
                        received += len(chunk)
                        if not paused and received > 8 * MiB:  # the client stops reading for a while
                            paused = True
                            await asyncio.sleep(1.5)
                            assert gateway.memory_info().rss - baseline < 40 * MiB
    assert received == SIZE_MIB * MiB and got.hexdigest() == expected
    grew = sampler.peak - baseline
    assert grew < 40 * MiB, f"the gateway's RSS grew by {grew / MiB:.0f} MiB during a {SIZE_MIB} MiB download"
