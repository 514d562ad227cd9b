"""The usage table: rows appended in batches by `usage_log.UsageLog`, read by the admin API and CLI.

A batch goes in whole (one COPY on PostgreSQL), so one row PostgreSQL refuses (a NUL character in a text
column: its text types cannot hold one) would fail all of them; `append_each` is the fallback that writes
the batch row by row, each cleaned first, so a bad row costs that row at most. It is also how spooled rows
are written (store/recovery.py): a row is inserted only if its request has none yet, so a batch that may
have committed before its connection broke is never written twice.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import JSON, Select, and_, func, insert, or_, select
from sqlalchemy.engine import Connection

from inferplex.store import tables as t
from inferplex.store.backend import Database, unreachable
from inferplex.store.request_log import cache_outcome

log = logging.getLogger("inferplex.usage")

GROUPS = ("day", "model", "key", "account", "tag", "cache")
COLUMNS = tuple(c.name for c in t.usage.columns if c.name != "id")
_JSON = frozenset(c.name for c in t.usage.columns if isinstance(c.type, JSON))
# What a row written without the columns of migrations 0016 and 0020 holds in them (a spooled row kept by an
# older version, the Unify dialect's logged queries, a batch line's row): unknown, no attempt failed, and no
# cache outcome.
_LATER = {"route": None, "operation": None, "error_type": None, "attempts": None, "attempt_errors": 0, "cache": None}


@dataclass(frozen=True, slots=True)
class UsageFilter:
    key_id: str | None = None
    account_id: str | None = None
    model: str | None = None
    since: float | None = None
    until: float | None = None
    cache: str | None = None  # a cache outcome (request_log.CACHE_OUTCOMES) or `hits`

    def apply(self, query: Select[Any]) -> Select[Any]:
        u = t.usage.c
        if self.cache is not None:
            query = query.where(cache_outcome(self.cache))
        if self.key_id is not None:
            query = query.where(u.key_id == self.key_id)
        if self.account_id is not None:
            query = query.where(u.account_id == self.account_id)
        if self.model is not None:
            query = query.where(u.model == self.model)
        if self.since is not None:
            query = query.where(u.created_at >= self.since)
        if self.until is not None:
            query = query.where(u.created_at < self.until)
        return query


@dataclass(frozen=True, slots=True)
class QueryFilter:
    """The rows one caller may read, narrowed as the Unify dialect's query routes ask (`/v0/queries`,
    `/v0/metrics`, ...): scoped to an account or a key, unless `everyone` (an admin caller)."""

    account_id: str | None = None
    key_id: str | None = None
    everyone: bool = False
    endpoints: tuple[tuple[str, str], ...] = ()  # (model, provider) pairs: any of them
    models: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()
    since: float | None = None
    until: float | None = None
    failures: str = "include"  # "exclude" (status < 400 only), "include", or "only"
    end_user: str | None = None

    def apply(self, query: Select[Any]) -> Select[Any]:
        u = t.usage.c
        if not self.everyone:  # never every row by accident: an unscoped caller sees its own key's rows
            query = query.where(u.account_id == self.account_id if self.account_id else u.key_id == self.key_id)
        if self.endpoints:
            query = query.where(or_(*(and_(u.model == m, u.provider == p) for m, p in self.endpoints)))
        if self.models:
            query = query.where(u.model.in_(self.models))
        if self.providers:
            query = query.where(u.provider.in_(self.providers))
        if self.since is not None:
            query = query.where(u.created_at >= self.since)
        if self.until is not None:
            query = query.where(u.created_at < self.until)
        if self.failures == "exclude":
            query = query.where(u.status < 400)
        elif self.failures == "only":
            query = query.where(u.status >= 400)
        if self.end_user is not None:
            query = query.where(u.end_user == self.end_user)
        return query


def _plain(row: Any) -> dict[str, Any]:
    return {str(k): v for k, v in row._mapping.items()}  # str(): column names are a str subclass


def _json(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def cleaned(value: Any) -> Any:
    """`value` with every NUL character in its strings (keys and nested values too) replaced by U+FFFD:
    PostgreSQL's text types cannot hold NUL, and a caller can send one (`"user": "a\\u0000b"`)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, list):
        return [cleaned(v) for v in value]
    if isinstance(value, dict):
        return {cleaned(k): cleaned(v) for k, v in value.items()}
    return value


def _insert_once(db: Database, row: dict[str, Any], conn: Connection) -> bool:
    """Insert `row` unless its request already has a usage row (ix_usage_request_id, migration 0006)."""
    found = conn.execute(select(t.usage.c.id).where(t.usage.c.request_id == row["request_id"]).limit(1)).first()
    if found is not None:
        return False
    key = conn.execute(insert(t.usage).values(row)).inserted_primary_key
    assert key is not None  # a single-row INSERT always reports it
    db.usage_inserted(conn, int(key[0]))
    return True


class UsageStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        # Made once: the engine's cheapest append (an executemany on the driver, or COPY), fed plain tuples.
        self._insert = db.bulk_insert(t.usage, [c for c in COLUMNS if c not in _LATER] + [*_LATER])
        self._order = [(name, name in _JSON) for name in COLUMNS if name not in _LATER]
        self._later = [(name, name in _JSON, _LATER[name]) for name in COLUMNS if name in _LATER]

    async def append(self, rows: list[dict[str, Any]]) -> None:
        """Insert rows that carry every column of `COLUMNS` (the guard's usage rows), or all but those of
        `_LATER`."""
        if rows:
            order, later = self._order, self._later
            params = [
                (
                    *[_json(r[k]) if js else r[k] for k, js in order],
                    *[_json(r.get(k, d)) if js else r.get(k, d) for k, js, d in later],
                )
                for r in rows
            ]
            await self._insert(params)

    async def append_each(self, rows: list[dict[str, Any]]) -> int:
        """Write `rows` one by one, each cleaned (`cleaned`) and only if its request has no row yet; a row the
        database still refuses is logged and dropped, alone. How many were written. Raises if the database
        cannot be reached (what was written stays written: calling again skips it)."""
        written = 0
        for row in rows:
            clean = {k: cleaned(row[k] if k not in _LATER else row.get(k, _LATER[k])) for k in COLUMNS}
            try:
                written += await self.db.write(lambda conn, r=clean: _insert_once(self.db, r, conn))  # type: ignore[misc]
            except Exception as exc:
                if unreachable(exc) is not None:
                    raise
                log.error("the usage row of request %s cannot be written; dropped: %s", row.get("request_id"), exc)
        return written

    async def rows(self, where: UsageFilter, limit: int = 100) -> list[dict[str, Any]]:
        query = where.apply(select(t.usage)).order_by(t.usage.c.created_at.desc(), t.usage.c.id.desc()).limit(limit)
        return [_plain(r) for r in await self.db.read(lambda conn: conn.execute(query).all())]

    async def totals(self, by: str, where: UsageFilter) -> list[dict[str, Any]]:
        """Requests, tokens and cost grouped by day (UTC), model, key, account, tag, or cache outcome."""
        if by not in GROUPS:
            raise ValueError(f"cannot group usage by {by!r} (choose from {', '.join(GROUPS)})")
        u = t.usage.c
        measures = [
            func.count().label("requests"),
            func.coalesce(func.sum(u.prompt_tokens), 0).label("prompt_tokens"),
            func.coalesce(func.sum(u.completion_tokens), 0).label("completion_tokens"),
            func.coalesce(func.sum(u.cached_tokens), 0).label("cached_tokens"),
            func.coalesce(func.sum(u.cost_micros), 0).label("cost_micros"),
        ]
        if by == "tag":
            return await self._by_tag(where)
        group: Any
        if by == "day":
            group = func.floor(u.created_at / 86400)
        else:
            group = {"model": u.model, "key": u.key_id, "account": u.account_id, "cache": u.cache}[by]
        query = where.apply(select(group.label("group"), *measures)).group_by(group).order_by(group)
        rows = [_plain(r) for r in await self.db.read(lambda conn: conn.execute(query).all())]
        for r in rows:
            for k in ("requests", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_micros"):
                r[k] = int(r[k])
            if by == "day":
                r["group"] = dt.datetime.fromtimestamp(int(r["group"]) * 86400, dt.UTC).date().isoformat()
        return rows

    async def _by_tag(self, where: UsageFilter) -> list[dict[str, Any]]:
        """Tags are a JSON list per row: grouped here, in Python, to stay portable across engines."""
        u = t.usage.c
        query = where.apply(select(u.tags, u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.cost_micros))
        out: dict[str, dict[str, Any]] = {}
        for row in await self.db.read(lambda conn: conn.execute(query).all()):
            for tag in row.tags or ():
                acc = out.setdefault(
                    tag,
                    {
                        "group": tag,
                        "requests": 0,
                        "prompt_tokens": 0,
                        "completion_tokens": 0,
                        "cached_tokens": 0,
                        "cost_micros": 0,
                    },
                )
                acc["requests"] += 1
                for k in ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_micros"):
                    acc[k] += int(getattr(row, k))
        return [out[k] for k in sorted(out)]

    async def page(self, where: QueryFilter, tags: frozenset[str], offset: int, limit: int) -> list[dict[str, Any]]:
        """Rows newest first, `limit` of them after skipping `offset`, each with any of `tags` (if given).
        Tags are a JSON list per row, matched here in Python, to stay portable across engines: only the ids
        and tags of the window are read for that, then the page's rows themselves."""
        u = t.usage.c
        newest = (u.created_at.desc(), u.id.desc())
        if not tags:
            query = where.apply(select(t.usage)).order_by(*newest).offset(offset).limit(limit)
            return [_plain(r) for r in await self.db.read(lambda conn: conn.execute(query).all())]
        scan = where.apply(select(u.id, u.tags)).order_by(*newest)
        found = await self.db.read(lambda conn: conn.execute(scan).all())
        ids = [r.id for r in found if tags.intersection(r.tags or ())][offset : offset + limit]
        if not ids:
            return []
        query = select(t.usage).where(u.id.in_(ids)).order_by(*newest)
        return [_plain(r) for r in await self.db.read(lambda conn: conn.execute(query).all())]

    async def tag_names(self, where: QueryFilter) -> list[str]:
        """Every tag on the rows `where` selects, sorted."""
        query = where.apply(select(t.usage.c.tags))
        found: set[str] = set()
        for row in await self.db.read(lambda conn: conn.execute(query).all()):
            found.update(tag for tag in row.tags or () if isinstance(tag, str))
        return sorted(found)

    async def measures(self, where: QueryFilter, limit: int) -> list[dict[str, Any]]:
        """The timing and token columns of the newest `limit` rows `where` selects (what the Unify dialect's
        metrics are computed from), newest first."""
        u = t.usage.c
        columns = (u.created_at, u.model, u.provider, u.status, u.prompt_tokens, u.completion_tokens, u.cost_micros)
        timing = (u.total_ms, u.upstream_ms, u.ttft_ms, u.end_user)
        query = where.apply(select(*columns, *timing)).order_by(u.created_at.desc(), u.id.desc()).limit(limit)
        return [_plain(r) for r in await self.db.read(lambda conn: conn.execute(query).all())]

    async def cache_outcomes(self, since: float) -> list[tuple[str | None, str, int]]:
        """(model, cache outcome, requests) over the rows logged since `since` that the response cache applied
        to, whichever replica logged them: what `/admin/cache` computes the fleet's hit rate from. A range
        scan of `ix_usage_time`."""
        u = t.usage.c
        query = (
            select(u.model, u.cache, func.count().label("n"))
            .where(u.created_at >= since, u.cache.is_not(None))
            .group_by(u.model, u.cache)
            .order_by(u.model, u.cache)
        )
        rows = await self.db.read(lambda conn: conn.execute(query).all())
        return [(r.model, str(r.cache), int(r.n)) for r in rows]
