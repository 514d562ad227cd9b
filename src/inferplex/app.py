"""Assembles the ASGI application: configuration in, Starlette app out.

Adapters and the shared HTTP session are created in the lifespan (they need the running event loop) and
closed on shutdown; everything a handler needs hangs off one `services.Services` object on `app.state`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from inferplex.accounts.wiring import AccountServices
from inferplex.admin import routes as admin_routes
from inferplex.batches import wiring as batches_wiring
from inferplex.cache import wiring as cache_wiring
from inferplex.catalog import Catalog
from inferplex.config import Config
from inferplex.console import routes as console_routes
from inferplex.custom_endpoints.service import PROVIDER, CustomEndpoints
from inferplex.dialects.registry import dialects, error_payload, plain_error
from inferplex.edge import TEMPLATES, Endpoint, json_response, self_contained
from inferplex.families.registry import check_adapters
from inferplex.http_server import HeadLimits
from inferplex.jobs.poller import Poller
from inferplex.jobs.rows import JobRows
from inferplex.jobs.service import VideoJobs
from inferplex.media_store.store import MediaStore
from inferplex.observe import routes as observe_routes
from inferplex.observe.hub import Env
from inferplex.observe.wiring import build_hub
from inferplex.pipeline import Pipeline
from inferplex.processors.chain import gateway_factory
from inferplex.providers.base import Adapter
from inferplex.providers.http import new_session
from inferplex.providers.registry import load_factory
from inferplex.responses_api import wiring as responses_wiring
from inferplex.routing.router import build_router
from inferplex.services import Services, json_limits
from inferplex.serving.readiness import ready


@dataclass(slots=True)
class Resources:
    """What provider factories may use: the shared HTTP session and the whole configuration."""

    http: aiohttp.ClientSession
    config: Config


def build_adapters(config: Config, resources: Resources) -> dict[str, Adapter]:
    return {p.name: load_factory(p.kind)(p, resources) for p in config.providers}


async def _health(request: Request) -> Response:
    """Liveness: 200 while the process runs, draining or not (readiness is `/health/ready`, serving/)."""
    return json_response({"status": "ok"})


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own 404 and 405 (with its `Allow` header), in the dialect that owns the path asked for."""
    assert isinstance(exc, HTTPException)
    what = f"{request.method} {request.url.path}"
    if exc.status_code == 404:
        err = plain_error(f"Unknown route {what}.", 404, "unknown_route")
    elif exc.status_code == 405:
        err = plain_error(f"Method not allowed: {what}.", 405, "method_not_allowed")
    else:
        err = plain_error(exc.detail, exc.status_code, "invalid_request_error")
    payload = error_payload(request.url.path, err)
    headers = dict(exc.headers or {})
    if isinstance(payload.get("request_id"), str):  # a dialect whose bodies name the request (Inferada)
        headers["x-request-id"] = payload["request_id"]
    return json_response(payload, headers, exc.status_code)


class Gateway(Starlette):
    """The Starlette app, with its fixed-path API routes looked up in a dict before the router runs.

    Starlette's router matches each route's regex in turn and wraps every call in two middleware layers
    and an exception-handler shim: about a tenth of the gateway's CPU per proxied request
    (docs/benchmarks.md). Routes built by `edge.endpoint` render every failure themselves, so for them
    those layers add nothing; everything else (path parameters, 404 and 405, HEAD, lifespan, a mounted
    root_path) still takes Starlette's path.

    Middleware added to the app (CORS, OpenTelemetry, a request logger) must see every request, so an app
    with any takes Starlette's path for every route: the dict is emptied when middleware is added, given to
    the constructor, or found when the stack is built at start-up (`user_middleware` changed by hand).
    """

    # Read by the HTTP protocol (http_server.py) when a connection is made.
    head_limits: HeadLimits = HeadLimits()

    def __init__(self, *, routes: Sequence[BaseRoute], **kwargs: object) -> None:
        super().__init__(routes=routes, **kwargs)  # type: ignore[arg-type]
        self._exact: dict[tuple[str, str], Endpoint] = {
            (route.path, method): route.endpoint
            for route in routes
            if isinstance(route, Route) and not route.param_convertors and self_contained(route.endpoint)
            for method in route.methods or ()
            if method != "HEAD"
        }
        if self.user_middleware:
            self._exact.clear()
        for route in routes:  # each endpoint's declared path: its route label in metrics and logs
            if isinstance(route, Route):
                TEMPLATES.setdefault(route.endpoint, route.path)

    def add_middleware(self, middleware_class: Any, *args: Any, **kwargs: Any) -> None:
        super().add_middleware(middleware_class, *args, **kwargs)
        self._exact.clear()

    def build_middleware_stack(self) -> ASGIApp:
        if self.user_middleware:
            self._exact.clear()
        return super().build_middleware_stack()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            handler = self._exact.get((scope["path"], scope["method"]))
            if handler is not None:
                scope["app"] = self
                response = await handler(Request(scope, receive, send))
                await response(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def create_app(config: Config, master_key: str) -> Gateway:
    catalog = Catalog(config)
    hub = build_hub(config)  # metrics, traces, request log, alerts (observe/, issue 24)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        session = new_session()
        adapters = build_adapters(config, Resources(session, config))
        try:
            check_adapters(config, adapters)  # before anything else starts: a model no provider can serve
            accounts = app.state.accounts = await AccountServices.start(config, master_key)
        except BaseException:
            for adapter in adapters.values():
                await adapter.aclose()
            await session.close()
            raise
        router = build_router(config, catalog)
        pipeline = Pipeline(
            catalog, adapters, guard=accounts.guard, router=router, processors=gateway_factory(catalog, router)
        )
        custom = app.state.custom_endpoints = CustomEndpoints(accounts.db, config.custom_endpoints)
        if PROVIDER not in adapters:  # `name@custom` is the accounts' own, unless the operator took the name
            adapters[PROVIDER] = pipeline.custom = custom
        cache = app.state.cache = pipeline.cache = await cache_wiring.start(config, pipeline)  # issue 26
        media = await MediaStore.start(config, accounts.db)  # files, signed URLs, retention sweep (issue 22)
        jobs = VideoJobs(pipeline, JobRows(accounts.db), accounts.guard, media, config.jobs)
        poller = Poller(jobs)  # every replica polls the durable video jobs (jobs/poller.py)
        poller.start()
        responses = await responses_wiring.start(config, accounts, pipeline, media)  # issue 23
        batches = await batches_wiring.start(config, accounts, pipeline, media, responses)
        app.state.services = Services(
            pipeline,
            accounts.auth,
            config.server.max_body_bytes,
            json_limits(config.server),
            media=media,
            jobs=jobs,
            responses=responses,
            batches=batches,
        )
        await hub.start(Env(config, accounts, router, pipeline))
        try:
            yield
        finally:
            await hub.aclose()
            await batches.aclose()
            await responses.aclose()
            await poller.aclose()
            await router.aclose()
            for adapter in adapters.values():
                await adapter.aclose()
            await session.close()
            await media.aclose()
            if cache is not None:
                await cache.aclose()
            await accounts.aclose()

    health = [Route("/health", _health, methods=["GET"]), Route("/health/ready", ready, methods=["GET"])]
    routes: list[BaseRoute] = [*health, *(r for d in dialects() for r in d.routes)]
    routes += admin_routes.routes
    routes += observe_routes.ROUTES
    if config.console.enabled:
        routes += console_routes.ROUTES
    app = Gateway(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_error})
    app.state.hub = hub
    server = config.server
    app.head_limits = HeadLimits(
        server.max_request_line_bytes, server.max_header_bytes, server.max_head_bytes, server.lingering_close_s
    )
    return app
