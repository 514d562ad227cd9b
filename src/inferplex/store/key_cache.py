"""Key records a PostgreSQL replica keeps between changes, dropped when any writer changes a key.

The key lookup was one of the round trips every keyed request made. A replica now keeps what it looked up,
and drops all of it when PostgreSQL notifies `inferplex_keys`: migration 0003's triggers send that on any
change to a key or to an account's limits, whoever makes it (any replica's admin API, the CLI, SQL by
hand), in the committing transaction, so it reaches every listening replica before the writer hears of its
commit.

The cache is used only while its notification connection is up: until it is, and from the moment it is
found lost (closed, or a health check every `check_s` failing), every lookup goes to the database again, as
before, and nothing learned meanwhile is kept. A lookup that raced a notification (it read the database
before the change, and answers after the notification) does not store its answer: every notification
starts a new generation, and only an answer read within the current one is kept.

SQLite has no notifications; there triggers count changes in `key_changes.generation`, which the replica
reads instead (`CountedKeyCache`).

LISTEN needs a session of its own: behind a transaction pooler (PgBouncer's `pool_mode = transaction`) the
LISTEN would be run on whichever server session the pooler lent for that one statement, and the
notifications would reach whoever borrows that session next, or nobody. So the listening connection goes to
`storage.direct_database_url`, PostgreSQL itself; behind such a pooler without one, the replica keeps
nothing (`NoKeyCache`): every keyed request reads its key, and a change is still seen at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import asyncpg

from inferplex.listening import keep_listening

CHANNEL = "inferplex_keys"
APPLICATION = "inferplex-key-changes"  # how the notification connection shows in pg_stat_activity


class KeyCache:
    """The entries, valid for one generation of the keys table. `now()` is the current generation, or None
    when it cannot be known (then nothing is served from, or kept in, the cache)."""

    def __init__(self, size: int = 10_000) -> None:
        self._size = size
        self._entries: dict[Any, Any] = {}
        self._generation: int | None = None

    def now(self) -> int | None:
        raise NotImplementedError

    def start(self) -> None:
        """Begin watching for changes (called once the event loop runs)."""

    def get(self, key: Any, generation: int) -> Any:
        if generation != self._generation:
            self._entries.clear()
            self._generation = generation
            return None
        return self._entries.get(key)

    def put(self, key: Any, value: Any, generation: int) -> None:
        """Keep `value`, read from the database during `generation`, if nothing changed since."""
        if generation == self._generation == self.now():
            if len(self._entries) >= self._size:
                self._entries.clear()
            self._entries[key] = value

    async def aclose(self) -> None:
        return None


class CountedKeyCache(KeyCache):
    """SQLite: the generation is `key_changes.generation`, bumped by triggers, read at most once per pass of
    the event loop.

    The read itself is cheap, but under load our own writer commits between any two of them, and each
    commit makes SQLite drop the reading connection's page cache, so every read went back to the file: about
    30 µs a request (docs/benchmarks.md). One read per pass is as exact. The value read in a pass is
    forgotten by a callback queued behind it, which runs before anything that the loop's next poll for I/O
    brings in; so every request that uses the value had its first byte in before the read, and a change
    committed before a caller sent its request (a revocation by the CLI, say) is always seen by it."""

    def __init__(self, read: Callable[[], int | None], size: int = 10_000) -> None:
        super().__init__(size)
        self._read = read
        self._this_pass: int | None = None

    def now(self) -> int | None:
        if self._this_pass is None:
            value = self._read()
            if value is None:
                return None
            self._this_pass = value
            asyncio.get_running_loop().call_soon(self._forget)
        return self._this_pass

    def _forget(self) -> None:
        self._this_pass = None


class NoKeyCache(KeyCache):
    """Nothing kept: the generation is never known, so every lookup reads the database. What a replica behind
    a transaction pooler has when it has no direct connection to listen on."""

    def now(self) -> int | None:
        return None


class NotifiedKeyCache(KeyCache):
    """PostgreSQL: the generation is a count of notifications, kept while the listening connection is up."""

    def __init__(self, dsn: str, *, size: int = 10_000, check_s: float = 5.0) -> None:
        super().__init__(size)
        self._dsn = dsn
        self._check_s = check_s
        self._notified = 0
        self.live = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._listen(), name="key-cache-listener")

    def now(self) -> int | None:
        return self._notified if self.live else None

    def _changed(self, *_: Any) -> None:
        self._notified += 1

    async def _listen(self) -> None:
        what = "key change notifications (keys are read on every request)"
        await keep_listening(self._listen_once, self._lost, what=what, max_delay_s=self._check_s)

    async def _listen_once(self, up: Callable[[], None]) -> None:
        conn = await asyncpg.connect(
            self._dsn, timeout=self._check_s, server_settings={"application_name": APPLICATION}
        )
        try:
            lost = asyncio.Event()
            conn.add_termination_listener(lambda _: lost.set())
            await conn.add_listener(CHANNEL, self._changed)
            self._changed()  # whatever happened while nobody listened
            self.live = True
            up()
            while not lost.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), self._check_s)
                if not lost.is_set():
                    await conn.fetchval("SELECT 1", timeout=self._check_s)
        finally:
            conn.terminate()

    def _lost(self) -> None:
        self.live = False
        self._changed()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
