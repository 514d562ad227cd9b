"""A rolling restart under constant load fails no call (issue 25).

Each of the three replicas in turn gets SIGTERM, as an orchestrator stops it: its readiness answers 503 at
once, HAProxy's check takes it out within `drain_delay_s` while it still accepts, then it finishes what it
has in flight and exits 0. Its replacement (same port, same data directory) starts, and the next replica is
stopped only once HAProxy has seen the replacement UP. Buffered and streamed calls run throughout; every
one must be answered, and charged exactly what it reported.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time

from tests.fleet.books import account, ledger, nets, new_account, settled
from tests.fleet.conftest import DRAIN_DELAY_S, DRAIN_S, Fleet
from tests.fleet.load import Outcome, run

CREDITS = 5_000_000


def test_a_rolling_restart_fails_no_call(fleet: Fleet) -> None:
    admin = fleet.admin()
    account_id, key = new_account(admin, "rolling", CREDITS)
    rolled = threading.Event()
    exits: list[tuple[str, int, float]] = []
    out_after: list[float] = []  # how long HAProxy took to take each stopping replica out

    def roll() -> None:
        try:
            time.sleep(1.0)
            for replica in fleet.replicas:
                replica.signal(signal.SIGTERM)
                stopping = time.monotonic()
                out_after.append(fleet.lb.wait_until(replica.name, "DOWN", timeout=DRAIN_DELAY_S))  # still accepting
                exits.append((replica.name, replica.wait(DRAIN_DELAY_S + DRAIN_S + 5), time.monotonic() - stopping))
                replica.start()
                replica.wait_ready()
                fleet.lb.wait_until(replica.name, "UP")
            time.sleep(1.0)
        finally:
            rolled.set()

    async def load() -> list[Outcome]:
        roller = threading.Thread(target=roll, name="rolling-restart")
        roller.start()
        try:
            return await run(fleet.lb.url, {"rolling": key}, 8, rolled.is_set)
        finally:
            await asyncio.to_thread(roller.join)

    outcomes = asyncio.run(load())
    assert [(name, code) for name, code, _ in exits] == [("gw1", 0), ("gw2", 0), ("gw3", 0)]
    failed = [(o.error, o.stream, round(o.started % 1000, 2)) for o in outcomes if not o.ok]
    assert not failed, f"{len(failed)} of {len(outcomes)} calls failed: {failed[:10]}"
    assert len(outcomes) >= 100 and sum(o.stream for o in outcomes) >= 50

    # Every answer charged exactly what it reported; nothing left reserved, nothing released.
    settled(admin, [account_id], timeout=10)
    rows = ledger(admin, account_id)
    by_request = nets(rows)
    assert {o.request_id: -(o.cost or 0) for o in outcomes} == {r: n for r, n in by_request.items()}
    shown = account(admin, account_id)
    assert shown["balance_micros"] == sum(r["amount_micros"] for r in rows)
    assert shown["balance_micros"] == CREDITS - sum(o.cost or 0 for o in outcomes)
    assert not [r for r in rows if (r["note"] or "").startswith("released")]
    admin.close()
    print(f"\nrolling restart: {len(outcomes)} calls, 0 failed; out of HAProxy after " +
          ", ".join(f"{took:.1f}s" for took in out_after) + "; exited after " +
          ", ".join(f"{name} {took:.1f}s" for name, _, took in exits))  # fmt: skip
