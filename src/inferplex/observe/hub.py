"""The one place the request path reports to, and the sinks that listen (issue 24).

The request path calls a handful of hooks (`Hub.started`, `finished`, ...) at fixed points: the edge when a
request arrives and when its last byte has gone out, the router around each attempt and when a breaker
opens or closes. Each hook fans out to the sinks that override it: Prometheus metrics (`metrics.py`),
OpenTelemetry traces (`tracing.py`), the JSON request log (`access_log.py`) and alerts (`alerts.py`). A sink
that does not override a hook costs nothing for it: the hub keeps, per hook, only the bound methods that
are real, so with every sink off a hook is a loop over an empty tuple.

Everything a sink needs about a request is on its `Context` (`route_template`, `operation`, `model`,
`target`, `attempt_log`, `usage`, `cost_micros`, `timings`, `error`, `failure`, `stages`), so the hooks
carry little. Sinks never raise into the request path: a hook's failure is logged once and swallowed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from inferplex.context import Attempt, Context

log = logging.getLogger("inferplex.observe")

_HOOKS = ("started", "responded", "finished", "attempt_started", "attempt_finished", "breaker")


@dataclass(slots=True)
class Env:
    """What a sink may use once the app has started (`Sink.start`): the configuration, the accounts'
    services (database, ledger, usage store), the router (deployment health) and the pipeline."""

    config: Any
    accounts: Any
    router: Any
    pipeline: Any


class Sink:
    """A listener. Override the hooks it needs; the others are never called."""

    async def start(self, env: Env) -> None:
        """Called once in the app's lifespan, after the stores and the router exist."""

    async def aclose(self) -> None:
        """Called once on shutdown: flush what is buffered."""

    def started(self, ctx: Context, method: str) -> None:
        """A request arrived (before authentication); `ctx.route_template` names its route."""

    def responded(self, ctx: Context, status: int, streaming: bool) -> None:
        """The handler returned its response: the status line is about to go out."""

    def finished(self, ctx: Context, method: str, status: int, streaming: bool) -> None:
        """The last byte went out (or the caller left, status 499): the request is over, settled and
        metered. `ctx.error` is the error the caller received, if any (`ctx.failure` a stream's, after its
        first byte)."""

    def attempt_started(self, ctx: Context, record: Attempt) -> None:
        """The router is about to call a deployment (`record.deployment`)."""

    def attempt_finished(self, ctx: Context, record: Attempt) -> None:
        """That call ended (`record.outcome`, `status`, `latency_ms`); for a stream, when it closed."""

    def breaker(self, deployment: str, opened: bool) -> None:
        """This replica opened (or re-opened) a deployment's circuit breaker, or a probe closed it."""


def _overrides(sink: Sink, name: str) -> bool:
    return getattr(type(sink), name) is not getattr(Sink, name)


class Hub:
    """Fans each hook out to the sinks that implement it."""

    def __init__(self, sinks: Sequence[Sink] = ()) -> None:
        self.sinks: tuple[Sink, ...] = tuple(sinks)
        self._calls: dict[str, tuple[Callable[..., None], ...]] = {
            name: tuple(getattr(s, name) for s in self.sinks if _overrides(s, name)) for name in _HOOKS
        }
        self._started = self._calls["started"]
        self._responded = self._calls["responded"]
        self._finished = self._calls["finished"]
        self._attempt_started = self._calls["attempt_started"]
        self._attempt_finished = self._calls["attempt_finished"]
        self._breaker = self._calls["breaker"]
        self._failed: set[str] = set()

    @property
    def active(self) -> bool:
        """Whether any sink listens for the end of a request (the edge wraps responses only then)."""
        return bool(self._finished or self._responded)

    def sink(self, kind: type[Any]) -> Any:
        """The sink of that class, or None (the console reads the metrics sink's registry, say)."""
        return next((s for s in self.sinks if isinstance(s, kind)), None)

    async def start(self, env: Env) -> None:
        for s in self.sinks:
            await s.start(env)

    async def aclose(self) -> None:
        for s in self.sinks:
            try:
                await s.aclose()
            except Exception:
                log.exception("closing the %s sink failed", type(s).__name__)

    def _call(self, calls: tuple[Callable[..., None], ...], *args: Any) -> None:
        for call in calls:
            try:
                call(*args)
            except Exception:
                name = getattr(call, "__qualname__", repr(call))
                if name not in self._failed:  # once per hook: a broken sink must not flood the log
                    self._failed.add(name)
                    log.exception("observability hook %s failed; it keeps running, further failures unlogged", name)

    def started(self, ctx: Context, method: str) -> None:
        if self._started:
            self._call(self._started, ctx, method)

    def responded(self, ctx: Context, status: int, streaming: bool) -> None:
        if self._responded:
            self._call(self._responded, ctx, status, streaming)

    def finished(self, ctx: Context, method: str, status: int, streaming: bool) -> None:
        if self._finished:
            self._call(self._finished, ctx, method, status, streaming)

    def attempt_started(self, ctx: Context, record: Attempt) -> None:
        if self._attempt_started:
            self._call(self._attempt_started, ctx, record)

    def attempt_finished(self, ctx: Context, record: Attempt) -> None:
        if self._attempt_finished:
            self._call(self._attempt_finished, ctx, record)

    def breaker(self, deployment: str, opened: bool) -> None:
        if self._breaker:
            self._call(self._breaker, deployment, opened)


NULL_HUB = Hub()
