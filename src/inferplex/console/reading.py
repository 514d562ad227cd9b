"""A data page's store reads, and the database being unreachable: a 503 page that says so, not a 500.

The admin API gets this from `edge.endpoint`; console pages are plain routes (render.guarded), so the data
pages wrap their reads here.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import TypeVar

from inferplex.errors import GatewayError
from inferplex.store.backend import unreachable

T = TypeVar("T")
log = logging.getLogger("inferplex.console")


class StoreDown(GatewayError):
    status = 503
    type = "api_error"
    code = "store_unavailable"


async def reading(read: Awaitable[T]) -> T:
    """`read`'s result; a `StoreDown` (503) when the database cannot be reached."""
    try:
        return await read
    except Exception as exc:
        if (cause := unreachable(exc)) is None:
            raise
        log.warning("a console page could not read the database (%s)", type(cause).__name__)
        raise StoreDown("The gateway's database cannot be reached right now; reload shortly.") from None
