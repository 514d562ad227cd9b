"""Client CPU per Redis script call: redis-py's `Script` (pool, retry wrapper) vs `DedicatedScript`.

What a batched limit or breaker call costs the gateway's process on the client side, apart from Redis's
own work: `N` serial EVALSHA calls of a script that returns its arguments, with a limits batch's shape
(four keys, a lease and two operation strings), timed in process CPU time. Needs Redis on 127.0.0.1:6379;
writes nothing.

    .venv/bin/python bench/redis_calls.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import resource
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
import uvloop

from inferplex.redis_script import DedicatedScript

URL = "redis://127.0.0.1:6379/0"
SOURCE = "return ARGV"
KEYS = ["bench:rate:a", "bench:rate:b", "bench:conc:c", "bench:conc:d"]
ARGS = ["900", "A 2 1 1 60 60 1 60 60 1 0123456789abcdef", "F 0 1 0123456789abcdef"]


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _per_call(call: Callable[[], Awaitable[Any]], n: int) -> float:
    await call()  # connect and load the script first
    c0 = _cpu()
    for _ in range(n):
        await call()
    return (_cpu() - c0) / n * 1e6


async def _main(n: int) -> None:
    client: Any = aioredis.from_url(URL, socket_timeout=0.25, socket_connect_timeout=0.25, retry_on_timeout=False)
    pooled = client.register_script(SOURCE)
    dedicated = DedicatedScript(client, SOURCE)
    try:
        for _ in range(2):
            a = await _per_call(lambda: pooled(keys=KEYS, args=ARGS), n)
            b = await _per_call(lambda: dedicated(keys=KEYS, args=ARGS), n)
            print(f"redis-py Script (pool): {a:5.1f} µs/call   DedicatedScript: {b:5.1f} µs/call")
    finally:
        await dedicated.aclose()
        await client.aclose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20000)
    uvloop.run(_main(ap.parse_args().calls))


if __name__ == "__main__":
    main()
