"""Calibration: a minimal aiohttp reverse proxy, the kind of baseline the team's reference numbers came from.

It checks the bearer key, parses the JSON body, swaps the model, forwards it with one shared aiohttp
session, and relays the answer (buffered) or the SSE bytes as they arrive (stream). No validation, routing
table, timings or error mapping: the floor of what any Python gateway on this stack costs. Run by
`bench/run.py --server reference` exactly like the gateway (one process, same core, same load).

    BENCH_CONFIG=cfg.yaml BENCH_KEY=... python bench/reference_proxy.py PORT
"""

from __future__ import annotations

import os
import re
import sys

import aiohttp
import orjson
import uvloop
from aiohttp import web


def upstream_urls() -> dict[str, str]:
    """bench/run.py's config: provider 1 (0 ms) serves bench-model, provider 2 (50 ms) bench-model-50ms."""
    with open(os.environ["BENCH_CONFIG"]) as f:
        bases = re.findall(r'base_url: "([^"]+)"', f.read())
    return {"bench-model": bases[0] + "/chat/completions", "bench-model-50ms": bases[-1] + "/chat/completions"}


async def session_ctx(app: web.Application):  # type: ignore[no-untyped-def]
    app["s"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    yield
    await app["s"].close()


def make_app() -> web.Application:
    key = "Bearer " + os.environ["BENCH_KEY"]
    urls = upstream_urls()
    headers = {"Content-Type": "application/json", "Authorization": "Bearer " + os.environ["BENCH_UPSTREAM_KEY"]}

    async def chat(request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != key:
            return web.json_response({"error": "unauthorized"}, status=401)
        body = orjson.loads(await request.read())
        model = body["model"]
        body["model"] = "upstream-model"
        async with request.app["s"].post(urls[model], data=orjson.dumps(body), headers=headers) as up:
            if not body.get("stream"):
                data = orjson.loads(await up.read())
                data["model"] = model
                return web.Response(body=orjson.dumps(data), status=up.status, content_type="application/json")
            out = web.StreamResponse(status=up.status, headers={"Content-Type": "text/event-stream"})
            await out.prepare(request)
            async for chunk in up.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    return app


if __name__ == "__main__":
    uvloop.install()
    web.run_app(make_app(), host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
