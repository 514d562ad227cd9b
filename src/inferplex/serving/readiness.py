"""`GET /health/ready`: whether this process wants new requests, apart from whether it is alive (`/health`).

A load balancer sends new requests only to a ready process. On SIGTERM a process turns not ready at once (503)
and keeps serving for `server.drain_delay_s`, long enough for the balancer's health checks to see it and stop
sending, before it stops accepting (serving/drain.py). `/health` stays 200 throughout: the process is alive,
and a liveness probe must not restart a process that is only finishing its requests.

A ready answer names the process (`pid`, and `worker`, its slot under a supervisor), so an operator, or a
test, can see which worker answered; a draining one is the gateway's usual error body (code `draining`).
"""

from __future__ import annotations

import os
from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import Response
from typing_extensions import TypedDict

from inferplex.dialects.registry import error_payload
from inferplex.edge import json_response
from inferplex.errors import GatewayError


class ReadyBody(TypedDict):
    status: Literal["ready"]
    pid: int
    worker: int | None


class Readiness:
    """One process's readiness, flipped by its server's signal handler (one bool: no lock needed)."""

    __slots__ = ("draining", "worker")

    def __init__(self) -> None:
        self.draining = False
        self.worker: int | None = None  # the slot under a supervisor; None for a process of its own


def readiness_of(app: Any) -> Readiness:
    """The readiness `app` answers with, made on first use (the server and the route share it)."""
    state = app.state
    found = getattr(state, "readiness", None)
    if not isinstance(found, Readiness):
        found = state.readiness = Readiness()
    return found


async def ready(request: Request) -> Response:
    readiness = readiness_of(request.app)
    if readiness.draining:  # an error in the gateway's own dialect: a balancer reads only the status
        err = GatewayError("Draining: this process takes no new requests.", status=503, code="draining")
        err.type = "api_error"
        return json_response(error_payload(request.url.path, err), status=503)
    body: ReadyBody = {"status": "ready", "pid": os.getpid(), "worker": readiness.worker}
    return json_response(body)
