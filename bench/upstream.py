"""A fast fake OpenAI-compatible upstream for the gateway benchmarks.

One asyncio protocol on uvloop with a hand-rolled HTTP/1.1 parser (keep-alive, Content-Length bodies, no
pipelining surprises): every answer is pre-built bytes, so the upstream costs a few microseconds per request
and is never the bottleneck (measured in docs/benchmarks.md: it serves several times what the gateway does).

    POST .../chat/completions             -> chat.completion JSON with usage
    POST .../chat/completions "stream":true -> SSE (chunked): role chunk, N content chunks, finish chunk,
                                              usage chunk, data: [DONE]
    GET  /health                          -> {"status":"ok"}

`--latency-ms` delays every answer (the head and first byte of a stream included) by a fixed time, with a
timer, not a sleep per connection. `--chunk-interval-ms` spaces stream chunks. Binds 127.0.0.1 only.

    python bench/upstream.py --port 9101 --latency-ms 50
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys

try:
    import uvloop
except ImportError:  # pragma: no cover - the venv has it (uvicorn[standard])
    uvloop = None  # type: ignore[assignment]

MODEL = "upstream-model"
CREATED = 1735689600
USAGE = {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}

COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench0000000000000000000000",
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "system_fingerprint": "fp_bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello! How can I help you today?", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": USAGE,
    },
    separators=(",", ":"),
).encode()


def _chunk(delta: dict[str, object], finish: str | None = None, usage: bool = False) -> bytes:
    body: dict[str, object] = {
        "id": "chatcmpl-bench0000000000000000000000",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": MODEL,
        "system_fingerprint": "fp_bench",
        "choices": [] if usage else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if usage:
        body["usage"] = USAGE
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


WORDS = ["Hello", "!", " How", " can", " I", " help", " you", " today", "?"]


def stream_events(n_content: int) -> list[bytes]:
    events = [_chunk({"role": "assistant", "content": ""})]
    events += [_chunk({"content": WORDS[i % len(WORDS)]}) for i in range(n_content)]
    events.append(_chunk({}, finish="stop"))
    events.append(_chunk({}, usage=True))
    events.append(b"data: [DONE]\n\n")
    return events


def chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


BUFFERED = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(COMPLETION) + COMPLETION
)
HEALTH_BODY = b'{"status":"ok"}'
HEALTH = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(HEALTH_BODY),
    HEALTH_BODY,
)
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
STREAM_RE = re.compile(rb'"stream"\s*:\s*true')
CL_RE = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)
CLOSE_RE = re.compile(rb"\r\nconnection:\s*close", re.IGNORECASE)


class Upstream(asyncio.Protocol):
    latency = 0.0
    interval = 0.0
    events: list[bytes] = []
    whole_stream = b""

    def __init__(self) -> None:
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.loop = asyncio.get_running_loop()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[: end + 2]
            m = CL_RE.search(head)
            length = int(m.group(1)) if m else 0
            total = end + 4 + length
            if len(self.buf) < total:
                return
            body = self.buf[end + 4 : total]
            self.buf = self.buf[total:]
            self.handle(head, body)

    def handle(self, head: bytes, body: bytes) -> None:
        line = head[: head.find(b"\r\n")]
        close = CLOSE_RE.search(head) is not None
        if line.startswith(b"POST ") and b"/chat/completions " in line:
            if STREAM_RE.search(body):
                self.later(self.send_stream, close)
            else:
                self.later(self.send, BUFFERED, close)
        elif line.startswith(b"GET /health"):
            self.send(HEALTH, close)
        else:
            self.send(NOT_FOUND, close)

    def later(self, fn, *args) -> None:  # type: ignore[no-untyped-def]
        if self.latency > 0:
            self.loop.call_later(self.latency, fn, *args)
        else:
            fn(*args)

    def send(self, data: bytes, close: bool) -> None:
        if self.closed or self.transport is None:
            return
        self.transport.write(data)
        if close:
            self.transport.close()

    def send_stream(self, close: bool) -> None:
        if self.closed or self.transport is None:
            return
        if self.interval <= 0:
            self.transport.write(STREAM_HEAD + self.whole_stream)
            if close:
                self.transport.close()
            return
        self.transport.write(STREAM_HEAD + chunked(self.events[0]))
        for i, ev in enumerate(self.events[1:], start=1):
            self.loop.call_later(self.interval * i, self.send, chunked(ev), False)
        self.loop.call_later(self.interval * len(self.events), self.send, b"0\r\n\r\n", close)


async def serve(host: str, port: int, ready_fd: int | None) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Upstream, host, port, backlog=4096, reuse_address=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"fake upstream on http://{host}:{port}/v1 latency={Upstream.latency * 1000:g}ms", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1", choices=["127.0.0.1", "localhost"])
    p.add_argument("--port", type=int, default=9101)
    p.add_argument("--latency-ms", type=float, default=0.0, help="fixed delay before every answer")
    p.add_argument("--chunks", type=int, default=8, help="content chunks per stream")
    p.add_argument("--chunk-interval-ms", type=float, default=0.0, help="delay between stream chunks")
    args = p.parse_args(argv)
    Upstream.latency = args.latency_ms / 1000
    Upstream.interval = args.chunk_interval_ms / 1000
    Upstream.events = stream_events(args.chunks)
    Upstream.whole_stream = b"".join(chunked(e) for e in Upstream.events) + b"0\r\n\r\n"
    if uvloop is not None:
        uvloop.install()
    try:
        asyncio.run(serve(args.host, args.port, None))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
