"""Alerts (issue 24): webhooks when an account or key crosses a threshold of its monthly budget, when a
deployment's circuit breaker opens, and when the share of requests that fail spikes.

Nothing here costs a request a store round trip or a wait. The hooks only note what they see in memory:
who spent (a set), a breaker that opened, a request's outcome in the error-rate window (a few integer
additions). The sink's own tasks do the rest off the request path:
- budgets: every `budget_check_s` one read of the month's spend and caps of the accounts and keys that
  spent since the last look (store/tables.py: `accounts`, `api_keys`, `key_spend`, the ledger's own figures);
  a threshold crossed is raised once per month per subject across replicas (its mark, alerts_outbox.py);
- events are written to the durable outbox by one writer task, and delivered by every replica's deliverer.
The error-rate window is each replica's own (its requests); replicas that spike in the same window raise
one alert.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from inferplex.config import Config
from inferplex.errors import SpendingCapReached
from inferplex.observe.alerts_outbox import Deliverer, Event, Hook, Outbox
from inferplex.observe.faults import of_request
from inferplex.observe.hub import Env, Sink
from inferplex.observe.settings import AlertsConfig
from inferplex.store import tables as t
from inferplex.store.backend import unreachable
from inferplex.store.moves import month_of

if TYPE_CHECKING:
    from inferplex.context import Context

log = logging.getLogger("inferplex.alerts")

_SERVED = ("provider", "gateway")  # the faults an error-rate counts; caller and policy refusals do not


def sink(config: Config) -> Sink | None:
    return AlertsSink(config.alerts) if config.alerts.webhooks else None


def usd(micros: int) -> str:
    """Micro-USD as dollars, cents always shown and no trailing zeros past them ($0.000048, $12.50)."""
    whole, frac = divmod(abs(micros), 1_000_000)
    digits = f"{frac:06d}".rstrip("0").ljust(2, "0")
    return f"{'-' if micros < 0 else ''}${whole:,}.{digits}"


def _month_name(month: int) -> str:
    return time.strftime("%B %Y", time.struct_time((month // 100, month % 100, 1, 0, 0, 0, 0, 1, 0)))


class ErrorWindow:
    """Requests and faults of the last `window_s`, in ten slots: a request costs a few additions, and a
    count is the sum kept up to date as slots expire. Fault types are counted per slot only for faults."""

    SLOTS = 10

    def __init__(self, window_s: float) -> None:
        self.slot_s = window_s / self.SLOTS
        self.requests = [0] * self.SLOTS
        self.faults = [0] * self.SLOTS
        self.types: list[Counter[str]] = [Counter() for _ in range(self.SLOTS)]
        self.total = self.failed = 0
        self._at = 0  # the current slot's number (time / slot_s)

    def note(self, now: float, fault: str | None) -> None:
        at = int(now / self.slot_s)
        if at != self._at:
            for n in range(max(self._at + 1, at - self.SLOTS + 1), at + 1):
                i = n % self.SLOTS
                self.total -= self.requests[i]
                self.failed -= self.faults[i]
                self.requests[i] = self.faults[i] = 0
                self.types[i].clear()
            self._at = at
        i = at % self.SLOTS
        self.requests[i] += 1
        self.total += 1
        if fault is not None:
            self.faults[i] += 1
            self.failed += 1
            self.types[i][fault] += 1

    def by_type(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for c in self.types:
            out.update(c)
        return dict(out.most_common())


@dataclass(frozen=True, slots=True)
class _Subject:
    kind: str  # account | key
    id: str
    name: str
    account_id: str | None
    cap: int
    spent: int


class AlertsSink(Sink):
    def __init__(self, config: AlertsConfig) -> None:
        self.config = config
        self.hooks = [Hook.of(h) for h in config.webhooks]
        names = [h.name for h in self.hooks]
        if len(set(names)) != len(names):  # a waiting delivery finds its hook by name: it must be one hook's
            raise ValueError(f"alerts.webhooks: two hooks share a name (or an unnamed hook's URL): {sorted(names)}")
        self.window = ErrorWindow(config.error_rate.window_s)
        self.thresholds = sorted(set(config.budget_thresholds))
        self.replica = socket.gethostname()
        self._spiking = False
        self._breakers: dict[str, float] = {}  # deployment -> when this replica last alerted it opened
        self._deployments: dict[str, dict[str, Any]] = {}
        self._spent_accounts: set[str] = set()
        self._spent_keys: set[str] = set()
        self._known_marks: set[str] = set()  # marks held already (ours or another replica's): never asked again
        self._pending: list[Event] = []
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self.outbox: Outbox | None = None
        self.deliverer: Deliverer | None = None
        self._env: Env | None = None

    # ---- lifecycle -------------------------------------------------------------------------------------

    async def start(self, env: Env) -> None:
        self._env = env
        for model in env.config.models:
            for d in model.deployments:
                key = d.id if d.id is not None else f"{d.provider}/{d.model}" + (f"@{d.region}" if d.region else "")
                found = self._deployments.setdefault(key, {"provider": d.provider, "models": []})
                found["models"].append(model.name)
        self.outbox = Outbox(env.accounts.db, self.hooks)
        self.deliverer = Deliverer(self.outbox, self.config)
        self.deliverer.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._write_forever(), name="alert-writer"),
                       loop.create_task(self._budgets_forever(), name="alert-budgets")]  # fmt: skip

    async def aclose(self) -> None:
        self._closing = True
        self._wake.set()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._pending:  # raised but not yet written: a last try, so an alert raised at shutdown is kept
            with contextlib.suppress(Exception):
                await self._write()
        if self.deliverer is not None:
            await self.deliverer.aclose()

    # ---- hooks (the request path: memory only) -----------------------------------------------------------

    def finished(self, ctx: Context, method: str, status: int, streaming: bool) -> None:
        account = ctx.principal.account_id
        if account is not None and (ctx.cost_micros or isinstance(ctx.error, SpendingCapReached)):
            self._spent_accounts.add(account)
            self._spent_keys.add(ctx.principal.key_id)
        kind = of_request(ctx, status)
        fault = None if kind is None else kind.split(".", 1)[0]
        if fault in ("caller", "policy") or (fault is None and ctx.operation is None):
            return  # not a request the gateway tried to serve (refused, or an admin call): not in the rate
        self.window.note(time.monotonic(), kind if fault is not None else None)
        self._check_rate(fault is not None)

    def breaker(self, deployment: str, opened: bool) -> None:
        if not opened:
            self._breakers.pop(deployment, None)
            return
        now = time.monotonic()
        last = self._breakers.get(deployment)
        if last is not None and now - last < self.config.breaker_repeat_s:
            return  # re-opened after a failed probe: still the same outage
        self._breakers[deployment] = now
        where = self._deployments.get(deployment, {})
        models = where.get("models", [])
        data = {"deployment": deployment, "provider": where.get("provider"), "models": models,
                "replica": self.replica}  # fmt: skip
        text = (f"Inferplex: the circuit breaker of deployment `{deployment}` opened"
                f"{' (models: ' + ', '.join(models) + ')' if models else ''}: it is failing, and traffic goes to "
                "other deployments until a probe succeeds.")  # fmt: skip
        bucket = int(time.time() // self.config.breaker_repeat_s)
        self._raise(Event("breaker", "breaker.opened", data, text, mark=f"breaker:{deployment}:{bucket}"))

    # ---- error rate ---------------------------------------------------------------------------------------

    def _check_rate(self, failed: bool) -> None:
        w, rule = self.window, self.config.error_rate
        if w.total < rule.min_requests:
            if self._spiking and not failed:
                self._spiking = False
            return
        rate = w.failed / w.total
        if self._spiking:
            if rate <= rule.threshold / 2:
                self._spiking = False  # recovered: the next spike alerts again
            return
        if not failed or rate <= rule.threshold:
            return
        self._spiking = True
        by_type = w.by_type()
        data = {"window_s": rule.window_s, "requests": w.total, "failed": w.failed, "rate": round(rate, 4),
                "threshold": rule.threshold, "error_types": by_type, "replica": self.replica}  # fmt: skip
        kinds = ", ".join(f"{k} {n}" for k, n in by_type.items())
        text = (f"Inferplex: {rate:.0%} of requests failed over the last {rule.window_s:g} s on {self.replica} "
                f"({w.failed} of {w.total}: {kinds}); the alert threshold is {rule.threshold:.0%}.")  # fmt: skip
        bucket = int(time.time() // rule.window_s)
        self._raise(Event("error_rate", "error_rate.spike", data, text, mark=f"error_rate:{bucket}"))

    # ---- writing events -------------------------------------------------------------------------------------

    def _raise(self, event: Event) -> None:
        self._pending.append(event)
        self._wake.set()

    async def _write_forever(self) -> None:
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            while self._pending and not self._closing:
                try:
                    await self._write()
                except Exception as exc:  # kept in memory and tried again: the database may be back soon
                    if unreachable(exc) is None:
                        log.exception("writing %d alerts failed; trying again", len(self._pending))
                    await asyncio.sleep(self.config.tick_s)

    async def _write(self) -> None:
        assert self.outbox is not None and self.deliverer is not None
        events, self._pending = self._pending, []
        try:
            written = await self.outbox.emit(events)
        except BaseException:
            self._pending[:0] = events
            raise
        self._known_marks.update(e.mark for e in events if e.mark is not None)
        for event in written:
            log.info("alert raised: %s", event.text)
        if written:
            self.deliverer.wake.set()

    # ---- budgets ----------------------------------------------------------------------------------------------

    async def _budgets_forever(self) -> None:
        swept = time.monotonic()
        while not self._closing:
            await asyncio.sleep(self.config.budget_check_s)
            if time.monotonic() - swept >= self.config.budget_sweep_s:
                swept = time.monotonic()
                with contextlib.suppress(Exception):  # what the look finds is found again by the next
                    await self.check_budgets(None, None)
            if not (self._spent_accounts or self._spent_keys):
                continue
            accounts, self._spent_accounts = self._spent_accounts, set()
            keys, self._spent_keys = self._spent_keys, set()
            try:
                await self.check_budgets(accounts, keys)
            except Exception as exc:  # looked at again the next time they spend
                self._spent_accounts |= accounts
                self._spent_keys |= keys
                if unreachable(exc) is None:
                    log.exception("checking budgets failed")

    async def check_budgets(self, accounts: set[str] | None, keys: set[str] | None) -> None:
        """Raise the highest threshold each subject newly crossed (lower ones crossed with it are marked too,
        so a jump from 10% to 90% is one alert, not three). None: every capped account (or key) past the
        lowest threshold, the sweep that finds spend no request of this replica made (another replica's,
        a batch's, a video job's, or spend from before this replica started)."""
        assert self._env is not None and self.outbox is not None
        if not self.thresholds:
            return
        await self._env.accounts.ledger.key_months(())  # this replica's queued settlements first
        now = time.time()
        month = month_of(now)
        low = self.thresholds[0]
        subjects = await self._env.accounts.db.read(lambda conn: _subjects(conn, accounts, keys, month, low))
        crossed: dict[str, tuple[_Subject, list[float]]] = {}
        for s in subjects:
            over = [x for x in self.thresholds if s.spent >= x * s.cap]
            marks = [_budget_mark(s, month, x) for x in over]
            fresh = [x for x, m in zip(over, marks, strict=True) if m not in self._known_marks]
            if fresh:
                crossed[f"{s.kind}:{s.id}"] = (s, fresh)
        if not crossed:
            return
        held = await self.outbox.marked([_budget_mark(s, month, x) for s, xs in crossed.values() for x in xs])
        events = []
        for subject, fresh in crossed.values():
            new = [x for x in fresh if _budget_mark(subject, month, x) not in held]
            self._known_marks.update(_budget_mark(subject, month, x) for x in fresh if x not in new)
            if not new:
                continue
            for lower in new[:-1]:  # crossed together with a higher one: marked without an alert
                events.append(Event("budget", "budget.threshold", {}, "", _budget_mark(subject, month, lower), True))
            events.append(_budget_event(subject, month, new[-1]))
        for event in events:
            self._raise(event)


def _budget_mark(s: _Subject, month: int, threshold: float) -> str:
    return f"budget:{s.kind}:{s.id}:{month}:{threshold:g}"


def _budget_event(s: _Subject, month: int, threshold: float) -> Event:
    m = f"{month // 100}-{month % 100:02d}"
    data = {"subject": s.kind, "account_id": s.account_id, "key_id": s.id if s.kind == "key" else None,
            "name": s.name, "month": m, "threshold": threshold, "cap_micros": s.cap, "spent_micros": s.spent,
            "fraction": round(s.spent / s.cap, 4)}  # fmt: skip
    who = f"account `{s.name}` ({s.id})" if s.kind == "account" else f"key `{s.name}` ({s.id})"
    text = (f"Inferplex: {who} has spent {s.spent / s.cap:.0%} of its monthly budget in {_month_name(month)}: "
            f"{usd(s.spent)} of {usd(s.cap)} (alert at {threshold:.0%}).")  # fmt: skip
    return Event("budget", "budget.threshold", data, text, mark=_budget_mark(s, month, threshold))


def _subjects(
    conn: Connection, accounts: set[str] | None, keys: set[str] | None, month: int, low: float
) -> list[_Subject]:
    """The capped ones among these accounts and keys (None: all of them, read only past the lowest
    threshold this month), with this month's settled spend."""
    out = []
    if accounts is None or accounts:
        a = t.accounts.c
        query = select(a.id, a.name, a.monthly_cap_micros, a.spend_month, a.month_spent_micros).where(
            a.monthly_cap_micros > 0
        )
        if accounts is None:
            query = query.where(a.spend_month == month, a.month_spent_micros >= a.monthly_cap_micros * low)
        else:
            query = query.where(a.id.in_(sorted(accounts)))
        for r in conn.execute(query):
            spent = int(r.month_spent_micros) if r.spend_month == month else 0
            out.append(_Subject("account", r.id, r.name, r.id, int(r.monthly_cap_micros), spent))
    if keys is None or keys:
        k, ks = t.api_keys.c, t.key_spend.c
        key_query = (
            select(k.id, k.name, k.account_id, k.monthly_cap_micros, ks.spend_month, ks.month_spent_micros)
            .select_from(t.api_keys.join(t.key_spend, ks.key_id == k.id))
            .where(k.monthly_cap_micros > 0)
        )
        if keys is None:
            key_query = key_query.where(ks.spend_month == month, ks.month_spent_micros >= k.monthly_cap_micros * low)
        else:
            key_query = key_query.where(k.id.in_(sorted(keys)))
        for row in conn.execute(key_query):
            spent = int(row.month_spent_micros) if row.spend_month == month else 0
            out.append(_Subject("key", row.id, row.name, row.account_id, int(row.monthly_cap_micros), spent))
    return out
