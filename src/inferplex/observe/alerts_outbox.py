"""Alert deliveries: a durable outbox any replica delivers from, signed, retried, each try recorded.

An alert is written, never sent, on the replica that raised it: one `alert_deliveries` row per webhook that
wants its kind of event (migration 0018), in one transaction with its mark (`alert_marks`, for an alert that
may fire only once: a threshold of a month, say), so two replicas that raise the same alert write it once.
Every replica's deliverer claims due rows under a lease (store/leasing.py, as video jobs and batch lines
are claimed) and POSTs each; the outcome is written fenced by the lease's token, with a row per try in
`alert_attempts`. A failed try is due again after an exponential backoff, until `max_attempts`. So a
delivery survives the replica that raised it, a receiver that is down, and a replica that stops mid-try (its
lease lapses and another replica sends it again: a receiver sees the same `webhook-id`, and dedupes on it).

Signatures follow Standard Webhooks (standardwebhooks.com): `webhook-id` (the event's id, the same on every
try), `webhook-timestamp` (UNIX seconds of the try) and `webhook-signature: v1,<base64 HMAC-SHA256 of
"id.timestamp.body">`. The body is stored as sent, so every try signs the same bytes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import logging
import random
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from sqlalchemy import Column, Float, Index, Integer, MetaData, String, Table, Text, delete, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from inferplex.config import resolve_secret
from inferplex.observe.settings import AlertEvent, AlertsConfig, WebhookConfig
from inferplex.store.backend import Database, unreachable
from inferplex.store.leasing import claim_due, look_forever

log = logging.getLogger("inferplex.alerts")

metadata = MetaData()

alert_deliveries = Table(
    "alert_deliveries",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("event_id", String(40), nullable=False),
    Column("event_type", String(40), nullable=False),
    Column("hook", String(64), nullable=False),
    Column("body", Text, nullable=False),
    Column("status", String(16), nullable=False),  # pending | delivered | failed | dropped
    Column("attempts", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("next_attempt_at", Float),  # due: NULL once delivered or given up
    Column("delivered_at", Float),
    Column("last_status", Integer),
    Column("last_error", Text),
    Column("claimed_by", String(40)),
    Column("claimed_until", Float),
    Index("ix_alert_deliveries_next_attempt_at", "next_attempt_at"),
    Index("ix_alert_deliveries_created_at", "created_at"),
)
alert_attempts = Table(
    "alert_attempts",
    metadata,
    Column("delivery_id", String(40), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("at", Float, nullable=False),
    Column("status", Integer),
    Column("error", Text),
    Column("latency_ms", Float, nullable=False),
)
alert_marks = Table(
    "alert_marks",
    metadata,
    Column("key", String(400), primary_key=True),
    Column("created_at", Float, nullable=False),
    Index("ix_alert_marks_created_at", "created_at"),
)
D = alert_deliveries.c

MARK_RETENTION_S = 70 * 86400.0  # longer than a month: a month's threshold marks outlive the month
USER_AGENT = "inferplex-alerts"


@dataclass(frozen=True, slots=True)
class Event:
    """One alert: `type` is `<kind>.<what>` (budget.threshold, breaker.opened, error_rate.spike); `text` is
    its one-line summary (Slack's body); `mark` names it when it may be raised only once."""

    kind: AlertEvent
    type: str
    data: dict[str, Any]
    text: str
    mark: str | None = None
    quiet: bool = False  # only its mark is written: a lower threshold crossed together with a higher one
    id: str = field(default_factory=lambda: "evt_" + secrets.token_hex(12))
    at: float = field(default_factory=time.time)

    def body(self, fmt: str) -> bytes:
        if fmt == "slack":
            return orjson.dumps({"text": self.text})
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(self.at)) + f".{int(self.at * 1000) % 1000:03d}Z"
        return orjson.dumps({"id": self.id, "type": self.type, "timestamp": stamp, "data": self.data})


@dataclass(frozen=True, slots=True)
class Hook:
    """A configured webhook, as deliveries find it: by its name (the row keeps the name, never the URL, which
    for Slack is itself a secret)."""

    name: str
    url: str
    key: bytes | None
    format: str
    events: frozenset[str]

    @classmethod
    def of(cls, config: WebhookConfig) -> Hook:
        """The hook with its references resolved (a variable that is not set stops the gateway's start)."""
        url = resolve_secret(config.url) if config.url.startswith(("env:", "file:")) else config.url
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"alerts.webhooks: {config.url} does not hold an http(s) URL")
        name = config.name or "url-" + hashlib.sha256(url.encode()).hexdigest()[:16]
        key = None if config.secret is None else signing_key(resolve_secret(config.secret))
        return cls(name, url, key, config.format, frozenset(config.events))


def signing_key(secret: str) -> bytes:
    """Standard Webhooks' secrets are `whsec_` + base64 of the key; any other string is the key's bytes."""
    if secret.startswith("whsec_"):
        with contextlib.suppress(binascii.Error, ValueError):
            return base64.b64decode(secret[6:], validate=True)
    return secret.encode()


def signature(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = msg_id.encode() + b"." + str(timestamp).encode() + b"." + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def backoff_s(config: AlertsConfig, attempts: int) -> float:
    """The wait after the `attempts`-th failed try: doubling from `retry_initial_s`, at most `retry_max_s`."""
    base: float = min(config.retry_max_s, config.retry_initial_s * 2.0 ** min(attempts - 1, 40))
    return base * random.uniform(1.0, 1.1)


class Outbox:
    """The three tables, on whichever engine the gateway's store runs."""

    def __init__(self, db: Database, hooks: Sequence[Hook]) -> None:
        self.db = db
        self.hooks = {h.name: h for h in hooks}
        self._dialect = postgresql if db.dialect.name == "postgresql" else sqlite

    def _insert_mark(self, conn: Connection, key: str, now: float) -> bool:
        statement = self._dialect.insert(alert_marks).values(key=key, created_at=now).on_conflict_do_nothing()
        return bool(conn.execute(statement).rowcount)

    async def emit(self, events: Sequence[Event]) -> list[Event]:
        """Write each event's deliveries (and its mark, if it has one) in one transaction: the events written,
        leaving out those whose mark another writer (this replica earlier, or another) already holds."""
        now = time.time()

        def run(conn: Connection) -> list[Event]:
            written = []
            for event in events:
                if event.mark is not None and not self._insert_mark(conn, event.mark, now):
                    continue
                if event.quiet:
                    continue
                rows = [
                    {"id": "whd_" + secrets.token_hex(12), "event_id": event.id, "event_type": event.type,
                     "hook": hook.name, "body": event.body(hook.format).decode(), "status": "pending",
                     "attempts": 0, "created_at": now, "next_attempt_at": now}
                    for hook in self.hooks.values() if event.kind in hook.events
                ]  # fmt: skip
                if rows:
                    conn.execute(insert(alert_deliveries), rows)
                written.append(event)
            return written

        return await self.db.write(run)

    async def marked(self, keys: Sequence[str]) -> set[str]:
        """Which of these marks are held already."""
        if not keys:
            return set()
        query = select(alert_marks.c.key).where(alert_marks.c.key.in_(list(keys)))
        return set(await self.db.read(lambda conn: conn.execute(query).scalars().all()))

    async def claim(self, token: str, now: float, lease_s: float, limit: int) -> Sequence[Any]:
        return await claim_due(self.db, alert_deliveries, D.next_attempt_at, token, now, lease_s, limit)

    async def tried(self, row: Any, token: str, attempt: dict[str, Any], values: dict[str, Any]) -> bool:
        """Record a try and the delivery's new state, if `token` still holds its lease."""

        def run(conn: Connection) -> bool:
            fenced = update(alert_deliveries).where(D.id == row.id, D.claimed_by == token)
            if not conn.execute(fenced.values(values)).rowcount:
                return False
            conn.execute(insert(alert_attempts).values(delivery_id=row.id, **attempt))
            return True

        return await self.db.write(run)

    async def sweep(self, now: float, retention_s: float) -> None:
        """Forget finished deliveries (and their tries) older than `retention_s`, and old marks."""

        def run(conn: Connection) -> None:
            done = select(D.id).where(D.next_attempt_at.is_(None), D.created_at < now - retention_s)
            ids = list(conn.execute(done.limit(5000)).scalars())
            if ids:
                conn.execute(delete(alert_attempts).where(alert_attempts.c.delivery_id.in_(ids)))
                conn.execute(delete(alert_deliveries).where(D.id.in_(ids)))
            old = max(retention_s, MARK_RETENTION_S)
            conn.execute(delete(alert_marks).where(alert_marks.c.created_at < now - old))

        await self.db.write(run)


class Deliverer:
    """Every replica's worker over the outbox: claim what is due, POST it, record the try."""

    BATCH = 20
    SWEEP_S = 3600.0

    def __init__(self, outbox: Outbox, config: AlertsConfig) -> None:
        self.outbox = outbox
        self.config = config
        self.wake = asyncio.Event()
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._swept = 0.0

    def start(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.config.timeout_s)
        self._session = aiohttp.ClientSession(timeout=timeout, headers={"User-Agent": USER_AGENT})
        look = look_forever("alert deliverer", self.tick, self.config.tick_s, lambda: self._closing, self.wake)
        self._task = asyncio.get_running_loop().create_task(look, name="alert-deliverer")

    async def aclose(self) -> None:
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._session is not None:
            await self._session.close()

    async def tick(self) -> int:
        """Deliver what is due; how many were claimed."""
        now = time.time()
        if now - self._swept > self.SWEEP_S:
            self._swept = now
            await self.outbox.sweep(now, self.config.retention_s)
        token = secrets.token_hex(16)
        lease_s = self.config.timeout_s + 30  # a try ends within timeout_s; the rest is the write after it
        claimed = await self.outbox.claim(token, now, lease_s, self.BATCH)
        if claimed:
            await asyncio.gather(*(self._deliver(row, token) for row in claimed))
        return len(claimed)

    async def _deliver(self, row: Any, token: str) -> None:
        try:
            await self._send(row, token)
        except Exception as exc:  # the lease lapses and the row is tried again then
            if unreachable(exc) is None:
                log.exception("alert delivery %s failed to record its try", row.id)

    async def _send(self, row: Any, token: str) -> None:
        attempt_no = row.attempts + 1
        hook = self.outbox.hooks.get(row.hook)
        started = time.time()
        if hook is None:
            attempt = {"attempt": attempt_no, "at": started, "status": None, "latency_ms": 0.0,
                       "error": f"no webhook named {row.hook} is configured any longer"}  # fmt: skip
            await self.outbox.tried(row, token, attempt, self._ended(row, "dropped", attempt))
            log.warning("alert %s dropped: %s", row.event_id, attempt["error"])
            return
        status, error = await self._post(hook, row)
        took = (time.time() - started) * 1000
        attempt = {"attempt": attempt_no, "at": started, "status": status, "error": error, "latency_ms": took}
        if error is None:
            values = self._ended(row, "delivered", attempt) | {"delivered_at": time.time()}
        elif attempt_no >= self.config.max_attempts:
            values = self._ended(row, "failed", attempt)
            log.warning("alert %s to webhook %s given up after %d tries: %s", row.event_id, hook.name, attempt_no,
                        error)  # fmt: skip
        else:
            due = time.time() + backoff_s(self.config, attempt_no)
            values = {"attempts": attempt_no, "last_status": status, "last_error": error, "claimed_by": None,
                      "claimed_until": None, "next_attempt_at": due}  # fmt: skip
        await self.outbox.tried(row, token, attempt, values)

    @staticmethod
    def _ended(row: Any, status: str, attempt: dict[str, Any]) -> dict[str, Any]:
        return {"status": status, "attempts": attempt["attempt"], "last_status": attempt["status"],
                "last_error": attempt["error"], "next_attempt_at": None, "claimed_by": None,
                "claimed_until": None}  # fmt: skip

    async def _post(self, hook: Hook, row: Any) -> tuple[int | None, str | None]:
        """(HTTP status, error or None when delivered): a 2xx delivers; anything else is tried again."""
        assert self._session is not None
        body = row.body.encode()
        timestamp = int(time.time())
        headers = {"Content-Type": "application/json", "webhook-id": row.event_id,
                   "webhook-timestamp": str(timestamp)}  # fmt: skip
        if hook.key is not None:
            headers["webhook-signature"] = signature(hook.key, row.event_id, timestamp, body)
        try:
            async with self._session.post(hook.url, data=body, headers=headers, allow_redirects=False) as response:
                await response.read()
                if 200 <= response.status < 300:
                    return response.status, None
                return response.status, f"HTTP {response.status}"
        except TimeoutError:
            return None, f"no answer within {self.config.timeout_s:g}s"
        except aiohttp.ClientError as exc:
            return None, f"{type(exc).__name__}: {exc}".replace(hook.url, f"<webhook {hook.name}>")[:500]
