"""What this replica holds in the ledger, as its liveness lease (store/liveness.py) needs to know it.

- `holder`: the id this replica's reservations carry in their note (its row in `replicas`), so that if it
  is lost the others know which were its. None in a process that does not serve (the CLI): no note, no lease.
- Which reservations are still open, and under which id they were made: the oldest bounds where a survivor
  must start reading the ledger (`oldest`), and the id decides how each is settled (`settles_directly`).
- The fence. A survivor may release this replica's reservations once its lease has lapsed. A settlement
  applied by the ordinary batch after such a release would give the reservation back twice (the batch does
  not look for an earlier settlement: it need not, while its replica holds its lease). So a reservation is
  settled by the batch only while the lease it was made under is known to hold, with a third of the lease
  to spare (`lease_until`, set at each renewal); otherwise through the spool, whose replay applies a
  settlement only if the request has none yet: an undercharge at worst, never a double refund.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

FORGET_S = 86400.0  # an open reservation this old (a path that never settled it) is the orphan sweeper's


@dataclass
class Holding:
    holder: str | None = None
    lease_until: float = math.inf  # settle directly only before this (no lease yet: none to lose)
    _open: dict[str, tuple[float, str | None]] = field(default_factory=dict)

    def reserving(self, request_id: str) -> None:
        self._open[request_id] = (time.time(), self.holder)

    def refused(self, request_id: str) -> None:
        self._open.pop(request_id, None)

    def settles_directly(self, request_id: str) -> bool:
        """Forget the reservation, and say whether the batch may settle it (else: the spool's replay)."""
        opened = self._open.pop(request_id, None)
        return self.holder is None or (opened is not None and self.holds(opened[1]))

    def holds(self, holder: str | None) -> bool:
        """Whether a reservation made under `holder` (its note) is still safely this replica's."""
        return self.holder is None or (holder == self.holder and time.time() < self.lease_until)

    def oldest(self) -> float | None:
        """When the oldest reservation still open was asked for (None: none is)."""
        forget = time.time() - FORGET_S
        if self._open and min(at for at, _ in self._open.values()) < forget:
            self._open = {r: held for r, held in self._open.items() if held[0] >= forget}
        return min((at for at, _ in self._open.values()), default=None)
