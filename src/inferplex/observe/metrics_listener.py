"""The separate metrics listener (`observability.metrics.listen`): `GET /metrics`, unauthenticated, on an
address only the scraper can reach.

Served by aiohttp's web server on the gateway's own event loop (aiohttp is already the upstream client), so a
scrape reads the same in-loop series the `/metrics` route reads, and the listener installs no signal
handlers of its own (a second uvicorn server in the process would take over the gateway's).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web


async def listen(
    scrape: Callable[[], Awaitable[bytes]], content_type: str, address: str, reuse_port: bool = False
) -> web.AppRunner:
    """Start serving what `scrape` returns on "host:port" (an empty host: every interface); the runner
    stops it. `reuse_port` (a supervisor's worker): a reload's new worker binds it while the old one still
    drains (SO_REUSEPORT), and either answers for the whole server (metrics_workers.py)."""
    host, _, port = address.rpartition(":")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=await scrape(), headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, host or None, int(port), reuse_port=reuse_port or None).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
