"""The separate metrics listener (`observability.metrics.listen`): `GET /metrics`, unauthenticated, on an
address only the scraper can reach.

Served by aiohttp's web server on the gateway's own event loop (aiohttp is already the upstream client), so a
scrape reads the same in-loop series the `/metrics` route reads, and the listener installs no signal
handlers of its own (a second uvicorn server in the process would take over the gateway's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from inferplex.observe.metrics import MetricsSink


async def listen(sink: MetricsSink, address: str) -> web.AppRunner:
    """Start serving `sink` on "host:port" (an empty host: every interface); the runner stops it."""
    from inferplex.observe.metrics import CONTENT_TYPE

    host, _, port = address.rpartition(":")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=await sink.scrape(), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, host or None, int(port)).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
