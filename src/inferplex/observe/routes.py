"""`GET /metrics` on the gateway's own port: the Prometheus text, for callers with the `metrics` (or `admin`)
scope. Refusals are the OpenAI error object, as on the admin API. The separate, unauthenticated listener
(`observability.metrics.listen`) is metrics_listener.py."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.context import Context
from inferplex.dialects.openai import render_error
from inferplex.edge import endpoint
from inferplex.errors import NotFound
from inferplex.observe.metrics import CONTENT_TYPE, MetricsSink


async def _metrics(request: Request, ctx: Context) -> Response:
    sink = request.app.state.hub.sink(MetricsSink)
    if sink is None or not sink.config.gateway_route:
        raise NotFound(
            "Metrics are not served on this port (observability.metrics: enabled, gateway_route).",
            code="metrics_not_served",
        )
    return Response(await sink.scrape(), headers={"content-type": CONTENT_TYPE})


ROUTES: list[Route] = [Route("/metrics", endpoint(render_error, _metrics, "metrics"), methods=["GET"])]
