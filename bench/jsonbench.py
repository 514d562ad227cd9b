"""JSON micro-benchmark: orjson vs the standard library on the bodies the gateway handles per request.

Per buffered call the gateway parses the caller's request, serialises the upstream request, parses the
upstream's completion and serialises the answer; per stream it parses and re-serialises every chunk. This
times each of those (best of 5 repeats, microseconds per operation) and the whole per-request round.

    .venv/bin/python bench/jsonbench.py
"""

from __future__ import annotations

import json
import sys
import timeit
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import upstream

REQUEST = {
    "model": "bench-model",
    "messages": [
        {"role": "system", "content": "You are a helpful assistant. Answer briefly and precisely."},
        {"role": "user", "content": "What is the capital of France? Answer in one word."},
    ],
    "temperature": 0.2,
    "max_tokens": 256,
}
COMPLETION = orjson.loads(upstream.COMPLETION)
COMPLETION_OUT = dict(
    COMPLETION,
    timings={"total_ms": 2.31, "upstream_ms": 1.62, "gateway_ms": 0.69, "tokens_per_second": 7407.41},
)
CHUNK = orjson.loads(upstream.stream_events(1)[1][len(b"data: ") :])


def stdlib_dumps(o: object) -> bytes:
    return json.dumps(o, separators=(",", ":"), ensure_ascii=False).encode()


REQ_B = orjson.dumps(REQUEST)
COMP_B = upstream.COMPLETION
OUT_B = orjson.dumps(COMPLETION_OUT)
CHUNK_B = orjson.dumps(CHUNK)

# (operation, size of the JSON text in bytes, orjson, stdlib)
CASES = [
    ("parse caller request", len(REQ_B), lambda: orjson.loads(REQ_B), lambda: json.loads(REQ_B)),
    ("serialise upstream request", len(REQ_B), lambda: orjson.dumps(REQUEST), lambda: stdlib_dumps(REQUEST)),
    ("parse upstream completion", len(COMP_B), lambda: orjson.loads(COMP_B), lambda: json.loads(COMP_B)),
    ("serialise answer", len(OUT_B), lambda: orjson.dumps(COMPLETION_OUT), lambda: stdlib_dumps(COMPLETION_OUT)),
    ("stream chunk parse + serialise", len(CHUNK_B), lambda: orjson.dumps(orjson.loads(CHUNK_B)),
     lambda: stdlib_dumps(json.loads(CHUNK_B))),
]  # fmt: skip


def best(fn, number: int = 20000) -> float:  # type: ignore[no-untyped-def]
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> int:
    print(f"orjson {orjson.__version__}, json (CPython {sys.version.split()[0]}); µs per operation, best of 5\n")
    print("| operation | bytes | orjson µs | json µs | json / orjson |")
    print("|---|---|---|---|---|")
    total_o = total_j = 0.0
    for name, size, fo, fj in CASES:
        o, j = best(fo), best(fj)
        print(f"| {name} | {size} | {o:.2f} | {j:.2f} | {j / o:.1f}x |")
        if not name.startswith("stream"):
            total_o += o
            total_j += j
    print(f"| **one buffered call (4 ops above)** | | {total_o:.2f} | {total_j:.2f} | {total_j / total_o:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
