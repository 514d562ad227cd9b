"""The request log: the usage table read one request at a time, newest first, as the console and
`/admin/requests` show it.

Pages are cursor pages on (created_at, id), so the next page is an index range whatever the table's size
(an offset would read and skip every row before it). A tag filter is a JSON test compiled per engine
(`_HasTag`), so the store itself never asks which engine it has. Upstream failures are found through a
small partial index (`ix_usage_attempt_errors`, migration 0016) over the rows with a failed attempt, so
the providers page does not scan the log for them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Boolean, ColumnElement, Select, String, and_, bindparam, or_, select
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler

from inferplex.observe.faults import ERROR_TYPES, FAULTS
from inferplex.store import tables as t
from inferplex.store.backend import Database

STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx", "error")
# the response cache's outcomes a usage row records (migration 0020), and `none`: rows it did not apply to
CACHE_OUTCOMES = ("hit", "semantic-hit", "miss", "bypass", "none")
MAX_LIMIT = 1000
ERRORS_SCANNED = 5000  # rows with a failed attempt `recent_errors` reads at most, looking for one deployment's
_HIDDEN = ("request_body", "response_body", "attempts")
_u = t.usage.c
SUMMARY = tuple(c for c in t.usage.columns if c.name not in _HIDDEN)


class _HasTag(ColumnElement[bool]):
    """`tag` is one of the strings in the JSON list `column`."""

    type = Boolean()
    inherit_cache = False  # holds a column and a parameter of its own; compiled per use

    def __init__(self, column: ColumnElement[Any], tag: str) -> None:
        self.column = column
        self.tag = bindparam(None, tag, String)


@compiles(_HasTag, "sqlite")
def _has_tag_sqlite(element: _HasTag, compiler: SQLCompiler, **kw: Any) -> str:
    column, tag = compiler.process(element.column, **kw), compiler.process(element.tag, **kw)
    return f"EXISTS (SELECT 1 FROM json_each({column}) WHERE json_each.value = {tag})"


@compiles(_HasTag, "postgresql")
def _has_tag_postgresql(element: _HasTag, compiler: SQLCompiler, **kw: Any) -> str:
    column, tag = compiler.process(element.column, **kw), compiler.process(element.tag, **kw)
    return f"(CAST({column} AS JSONB) @> jsonb_build_array(CAST({tag} AS TEXT)))"


@dataclass(frozen=True, slots=True)
class RequestFilter:
    """Which requests a page shows; each None: any. `status` is a class (`STATUS_CLASSES`) or a code;
    `error_type` a closed type (observe/faults.py) or its prefix alone (`provider`); latency is `total_ms`."""

    since: float | None = None
    until: float | None = None
    model: str | None = None
    key_id: str | None = None
    account_id: str | None = None
    provider: str | None = None
    deployment: str | None = None
    status: str | None = None
    error_type: str | None = None
    min_cost_micros: int | None = None
    max_cost_micros: int | None = None
    min_latency_ms: float | None = None
    max_latency_ms: float | None = None
    tag: str | None = None
    cache: str | None = None  # one of `CACHE_OUTCOMES`, or `hits` (hit or semantic-hit)

    def apply(self, query: Select[Any]) -> Select[Any]:
        """`query` narrowed to the rows this filter selects; ValueError names a bad value."""
        for name in ("model", "key_id", "account_id", "provider", "deployment", "tag"):
            _no_nul(name, getattr(self, name))
        for name in ("model", "key_id", "account_id", "provider", "deployment"):
            value = getattr(self, name)
            if value is not None:
                query = query.where(_u[name] == value)
        for name, column, op in (
            ("since", _u.created_at, "ge"),
            ("until", _u.created_at, "lt"),
            ("min_cost_micros", _u.cost_micros, "ge"),
            ("max_cost_micros", _u.cost_micros, "le"),
            ("min_latency_ms", _u.total_ms, "ge"),
            ("max_latency_ms", _u.total_ms, "le"),
        ):
            value = getattr(self, name)
            if value is None:
                continue
            if not math.isfinite(value):
                raise ValueError(f"`{name}` must be a finite number.")
            query = query.where(column >= value if op == "ge" else column < value if op == "lt" else column <= value)
        if self.status is not None:
            query = query.where(_status(self.status))
        if self.error_type is not None:
            query = query.where(_error_type(self.error_type))
        if self.tag is not None:
            query = query.where(_HasTag(_u.tags, self.tag))
        if self.cache is not None:
            query = query.where(cache_outcome(self.cache))
        return query


def cache_outcome(outcome: str) -> ColumnElement[bool]:
    """The rows whose cache outcome is `outcome` (`CACHE_OUTCOMES`, or `hits`: either kind of hit)."""
    if outcome == "none":
        return _u.cache.is_(None)
    if outcome == "hits":
        return _u.cache.in_(("hit", "semantic-hit"))
    if outcome in CACHE_OUTCOMES:
        return _u.cache == outcome
    raise ValueError(f"`cache` must be one of {', '.join(CACHE_OUTCOMES)} or hits, not {outcome!r}.")


def _no_nul(name: str, value: str | None) -> None:
    """PostgreSQL's text cannot hold NUL, not even in a comparison: refused here, on every engine alike."""
    if value is not None and "\x00" in value:
        raise ValueError(f"`{name}` contains a NUL character.")


def _status(status: str) -> ColumnElement[bool]:
    if status == "error":
        return _u.status >= 400
    if status in STATUS_CLASSES:
        low = int(status[0]) * 100
        return and_(_u.status >= low, _u.status < low + 100)
    if len(status) == 3 and status.isdigit() and 100 <= int(status) <= 599:
        return _u.status == int(status)
    raise ValueError(f"`status` must be one of {', '.join(STATUS_CLASSES)} or an HTTP status code, not {status!r}.")


def _error_type(kind: str) -> ColumnElement[bool]:
    if kind in ERROR_TYPES:
        return _u.error_type == kind
    if kind in FAULTS:
        return _u.error_type.in_([e for e in ERROR_TYPES if e.startswith(kind + ".")])
    raise ValueError(f"`error_type` must be one of {', '.join((*FAULTS, *ERROR_TYPES))}, not {kind!r}.")


def cursor_of(row: dict[str, Any]) -> str:
    """A row's place in the newest-first order: its time (exactly, as Python prints a float) and id."""
    return f"{float(row['created_at'])!r}:{int(row['id'])}"


def _after(cursor: str) -> ColumnElement[bool]:
    """The rows older than `cursor` (`cursor_of`)."""
    at, _, row_id = cursor.rpartition(":")
    try:
        when, ident = float(at), int(row_id)
    except ValueError:
        raise ValueError("`before` is not a cursor this log gave out.") from None
    if not math.isfinite(when) or not 0 <= ident < 2**63:
        raise ValueError("`before` is not a cursor this log gave out.")
    return or_(_u.created_at < when, and_(_u.created_at == when, _u.id < ident))


@dataclass(frozen=True, slots=True)
class RequestPage:
    rows: list[dict[str, Any]]
    before: str | None  # the cursor of the next (older) page; None when there is none


def _plain(row: Any) -> dict[str, Any]:
    return {str(k): v for k, v in row._mapping.items()}


class RequestLog:
    """The usage table as a log of requests. Stateless: build one where needed."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def page(
        self, filters: RequestFilter = RequestFilter(), before: str | None = None, limit: int = 50
    ) -> RequestPage:
        """Up to `limit` requests, newest first, older than `before` (a cursor from an earlier page)."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"`limit` must be from 1 to {MAX_LIMIT}.")
        query = filters.apply(select(*SUMMARY))
        if before is not None:
            query = query.where(_after(before))
        query = query.order_by(_u.created_at.desc(), _u.id.desc()).limit(limit + 1)
        rows = [_plain(r) for r in await self.db.read(lambda conn: conn.execute(query).all())]
        for row in rows:
            row["cursor"] = cursor_of(row)
        more = len(rows) > limit
        rows = rows[:limit]
        return RequestPage(rows, rows[-1]["cursor"] if more else None)

    async def detail(self, request_id: str) -> dict[str, Any] | None:
        """One request: every column of its usage row (its attempts, and its bodies where they were logged)
        and the ledger moves it made. None if it has no row."""
        if "\x00" in request_id:  # no row can hold it (and PostgreSQL refuses it in a comparison)
            return None
        query = select(t.usage).where(_u.request_id == request_id).order_by(_u.id.desc()).limit(1)
        moves = select(t.ledger).where(t.ledger.c.request_id == request_id).order_by(t.ledger.c.id)

        def read(conn: Any) -> tuple[Any, list[Any]]:
            found = conn.execute(query).first()
            return found, (conn.execute(moves).all() if found is not None else [])

        found, entries = await self.db.read(read)
        if found is None:
            return None
        row = _plain(found)
        row["attempts"] = row["attempts"] or []
        row["cursor"] = cursor_of(row)
        row["ledger"] = [_plain(e) for e in entries]
        return row

    async def recent_errors(self, deployment: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        """The newest failed upstream attempts (of one deployment, if given), one row each, newest request
        first; a request that failed over shows its failed attempts though it succeeded. At most
        `ERRORS_SCANNED` requests with a failed attempt are looked at."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"`limit` must be from 1 to {MAX_LIMIT}.")
        columns = (_u.id, _u.request_id, _u.created_at, _u.model, _u.error_type, _u.attempts)
        query = select(*columns).where(_u.attempt_errors > 0).order_by(_u.created_at.desc(), _u.id.desc())
        out: list[dict[str, Any]] = []
        step, scanned = 200, 0
        while scanned < ERRORS_SCANNED and len(out) < limit:
            window = query.offset(scanned).limit(step)
            rows = await self.db.read(lambda conn, q=window: conn.execute(q).all())  # type: ignore[misc]
            for row in rows:
                for attempt in row.attempts or ():
                    if attempt.get("outcome") not in ("error", "failed_midstream"):
                        continue
                    if deployment is not None and attempt.get("deployment") != deployment:
                        continue
                    out.append({"request_id": row.request_id, "created_at": row.created_at, "model": row.model,
                                "deployment": attempt.get("deployment"), "outcome": attempt.get("outcome"),
                                "status": attempt.get("status"), "error": attempt.get("error"),
                                "latency_ms": attempt.get("latency_ms"), "error_type": row.error_type})  # fmt: skip
            if len(rows) < step:
                break
            scanned += step
            step = min(step * 4, ERRORS_SCANNED - scanned) or 1
        return out[:limit]
