"""The gateway leaves no reference cycles behind, idle or per request.

`inferplex serve` freezes what start-up allocated and runs the cyclic collector only every 200,000 net new
container objects (serving/worker.py): plain garbage is freed by reference counting at once, but garbage in a
reference cycle waits for that collection, which a gateway that makes few new objects reaches after an hour.
The one-hour soak (bench/soak.py) found such a source: the batch worker built SQLAlchemy statements each second
that left cycles (a negated EXISTS and its comparator; an expanding IN parameter's clone set), ~0.6 MB a minute
of garbage waiting for the collector. These tests run the gateway's lifespan (the batch worker looking every
50 ms) and calls through its ASGI interface with the collector off, then count what a collection finds: what
the gateway left in cycles. The caller is a bare ASGI one: httpx's response and its stream hold each other.

A closed connection's transport is left in a cycle by asyncio (a few objects each, on both ends). The streamed
calls failed on CI once with 42 transports in cycles after 200 streams: the gateway closed the upstream
response at `data: [DONE]` when the body's end had not arrived yet, closing the connection instead of
reusing it (providers/http.ended now waits for it; tests/memory/test_upstream_connections.py). The fake
upstream runs in this process, so its server side of each such connection counts here too: the failure
message says whose each transport was.
"""

from __future__ import annotations

import asyncio
import collections
import gc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from inferplex.app import create_app
from inferplex.config import parse_config
from tests.batches.worker_harness import MASTER, batch_config
from tests.fakes.openai_upstream import FakeOpenAI

# A cycle now and then may come from asyncio or a driver (a closed connection, an exception kept with its
# traceback): a few dozen objects. A source that runs per request or per look of the worker leaves hundreds.
FEW = 100


@pytest.fixture(autouse=True)
def _master(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATCHES_TEST_MASTER", MASTER)


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    yield
    gc.enable()


@asynccontextmanager
async def gateway(fake: FakeOpenAI, tmp: Path) -> AsyncIterator[Any]:
    """The app with its lifespan (stores, the usage writer, the batch worker) in the test's event loop."""
    app = create_app(parse_config(batch_config(fake, tmp), "<test>"), MASTER)
    async with app.router.lifespan_context(app):
        yield app


async def call(app: Any, path: str, key: str, body: bytes | None = None) -> tuple[int, bytes]:
    """One request through the app's ASGI interface, its response read whole: the status and the body."""
    head = [(b"host", b"gateway"), (b"authorization", b"Bearer " + key.encode())]
    if body is not None:
        head += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET" if body is None
             else "POST", "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
             "query_string": b"", "headers": head, "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80),
             "state": {}}  # fmt: skip
    done = asyncio.Event()
    read = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        if not read:
            read = True
            return {"type": "http.request", "body": body or b"", "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                done.set()

    await app(scope, receive, send)
    return status, b"".join(chunks)


def cyclic_garbage(upstream_port: int = 0) -> tuple[int, str]:
    """How many objects a full collection finds unreachable now, the commonest of their types, and whose the
    transports among them were (the gateway's connections to the upstream on `upstream_port`, the upstream's
    own end of them, or others)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        found = gc.collect()
    finally:
        gc.set_debug(0)
    kinds = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
    ends = collections.Counter(_whose(o, upstream_port) for o in gc.garbage if isinstance(o, asyncio.Transport))
    gc.garbage.clear()
    gc.collect()
    described = ", ".join(f"{n} {kind}" for kind, n in kinds.most_common(12))
    if ends:
        described += "; transports: " + ", ".join(f"{n} {end}" for end, n in ends.items())
    return found, described


def _whose(transport: asyncio.Transport, upstream_port: int) -> str:
    """Which end of which connection a (closed) transport was, from the addresses it kept."""
    local, remote = transport.get_extra_info("sockname"), transport.get_extra_info("peername")
    if isinstance(remote, tuple) and remote[1] == upstream_port:
        return "gateway to upstream"
    if isinstance(local, tuple) and local[1] == upstream_port:
        return "upstream's end"
    return f"{local} to {remote}"


async def test_an_idle_gateway_leaves_no_reference_cycles(
    fake_openai: FakeOpenAI, tmp_path: Path, collector_off: None
) -> None:
    async with gateway(fake_openai, tmp_path) as app:
        assert (await call(app, "/v1/models", MASTER))[0] == 200
        await asyncio.sleep(0.5)  # start-up's own garbage, and the worker's first looks
        gc.collect()
        await asyncio.sleep(2)  # about 40 looks of the batch worker, with its chores
        found, kinds = cyclic_garbage(fake_openai.port)
        assert found <= FEW, kinds


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
async def test_calls_with_every_accounts_stage_leave_no_reference_cycles(
    fake_openai: FakeOpenAI, tmp_path: Path, collector_off: None, stream: bool
) -> None:
    async with gateway(fake_openai, tmp_path) as app:
        spec = {"name": "cycles", "credits_micros": 10**9, "rpm": 10**6, "tpm": 10**9, "max_concurrent": 100}
        status, made = await call(app, "/admin/keys", MASTER, orjson.dumps(spec))
        assert status == 201, made
        key = orjson.loads(made)["key"]
        message = {"role": "user", "content": "one two three"}
        body = orjson.dumps({"model": "priced", "messages": [message], "stream": stream})

        async def calls(n: int) -> None:
            for _ in range(n):
                status, answer = await call(app, "/v1/chat/completions", key, body)
                assert status == 200, answer

        await calls(20)  # warm: pools, caches, the statement cache
        await asyncio.sleep(0.3)
        gc.collect()
        await asyncio.gather(*(calls(25) for _ in range(8)))  # 200 calls, 8 at a time
        await asyncio.sleep(0.3)  # their usage rows and settlements written
        found, kinds = cyclic_garbage(fake_openai.port)
        assert found <= FEW, kinds
