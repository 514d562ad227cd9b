"""A call to PostgreSQL cancelled while its connection is still being opened ends with the cancellation.

Background loops (the video poller, the spool's flusher) stop on shutdown by being cancelled; if closing the
half-opened connection raised instead (SQLAlchemy's "connection not started"), the cancellation was lost and
a replica hung on shutdown. The database here accepts TCP connections and never answers, as a PostgreSQL
behind a cut network would, so the call is always cancelled mid-connect.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from sqlalchemy import text

from inferplex.store.engine import open_database


async def test_a_call_cancelled_while_connecting_raises_cancelled_error() -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    db = open_database(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/x", pool_size=1, timeout_s=30)
    try:
        task = asyncio.create_task(db.single(lambda conn: conn.execute(text("SELECT 1"))))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
    finally:
        await db.aclose()
        silent.close()
