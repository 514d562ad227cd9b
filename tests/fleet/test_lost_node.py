"""Losing a node: one of three replicas is killed (SIGKILL) halfway through concurrent buffered and streamed load
with keys that have credits and limits (issue 25).

What the callers and the books must show afterwards:
- every call ended, with an answer or an error, none at its deadline (no hang);
- the calls started once the load balancer knew (a refused connection marks the replica down at once, and
  a call whose connection failed goes to another replica) were served by the survivors;
- the killed replica's reservations were released within the stated bound: its liveness lease
  (`storage.redis_lease_s`) plus a third of it (the survivors' next look) plus the writes
  (store/liveness.py), not the hour of the orphan sweeper;
- balance = ledger sum = credits minus what successful responses reported, except, and only on the killed
  replica, an answer sent just before the kill whose settlement died with it (then released: not charged,
  never charged twice); every failed call is charged nothing;
- the rpm limit and the concurrency limit held across the replicas (Redis), the killed replica's slot
  back within its lease.
"""

from __future__ import annotations

import asyncio
import signal
import time

from tests.fleet.books import LOST, account, ledger, nets, new_account, settled
from tests.fleet.conftest import LEASE_S, Fleet
from tests.fleet.load import DEADLINE_S, Outcome, held, run

RPM = 40
MAX_CONCURRENT = 3
CREDITS = 5_000_000
LOAD_S = 10.0
BOUND_S = LEASE_S + LEASE_S / 3 + 2.0  # the lease, the survivors' next look, then 2 s for the writes


def test_a_replica_killed_under_load(fleet: Fleet) -> None:
    admin = fleet.admin()
    rpm_account, rpm_key = new_account(admin, "rpm", CREDITS, rpm=RPM)
    conc_account, conc_key = new_account(admin, "conc", CREDITS, max_concurrent=MAX_CONCURRENT)
    budget_account, budget_key = new_account(admin, "budget", CREDITS)
    lost = fleet.replicas[1]
    start = time.monotonic()
    killed_at = 0.0

    async def load_and_kill() -> tuple[list[Outcome], list[Outcome]]:
        nonlocal killed_at
        keys = {"rpm": rpm_key, "conc": conc_key, "budget": budget_key}
        calls = asyncio.create_task(run(fleet.lb.url, keys, 15, lambda: time.monotonic() - start > LOAD_S))
        await asyncio.sleep(LOAD_S / 2 - 1)
        # Two streams on the replica about to die, so that it surely holds reservations when it does.
        flowing = [asyncio.Event(), asyncio.Event()]
        on_lost = [asyncio.create_task(held(lost.url, budget_key, "budget", f)) for f in flowing]
        await asyncio.wait_for(asyncio.gather(*(f.wait() for f in flowing)), 10)
        lost.signal(signal.SIGKILL)
        killed_at = time.time()
        return await calls, await asyncio.gather(*on_lost)

    outcomes, cut = asyncio.run(load_and_kill())
    assert [o.error is not None and o.request_id is not None for o in cut] == [True, True]
    elapsed = time.monotonic() - start
    assert lost.wait(5) == -signal.SIGKILL
    fleet.lb.wait_until(lost.name, "DOWN", timeout=5)

    # Every call ended; none hung.
    assert elapsed < LOAD_S + DEADLINE_S
    assert all(o.ended for o in outcomes)
    assert not [o for o in outcomes if o.error == "timeout"]
    # The kill cost the calls it had in flight, and only those: the survivors served the rest.
    failed = [o for o in outcomes if not o.ok and o.error != "429"]
    assert failed, "the killed replica had calls in flight: some must have failed"
    assert all(o.started <= killed_at + 1.0 for o in failed), [(o.error, o.started - killed_at) for o in failed]
    after = [o for o in outcomes if o.started > killed_at + 1.0]
    assert after and all(o.ok or o.error == "429" for o in after)
    assert sum(o.ok for o in after) >= 10

    # The killed replica's reservations were released within the bound.
    accounts = {"rpm": rpm_account, "conc": conc_account, "budget": budget_account}
    settled(admin, list(accounts.values()), timeout=BOUND_S + 5)
    rows = [row for account_id in accounts.values() for row in ledger(admin, account_id)]
    releases = [r for r in rows if r["kind"] == "settle" and (r["note"] or "").startswith(LOST)]
    assert releases, "the killed replica held reservations when it died: they must have been released"
    released_after = max(r["created_at"] for r in releases) - killed_at
    assert released_after <= BOUND_S, f"released {released_after:.1f}s after the kill; bound {BOUND_S:.1f}s"
    lost_id = releases[0]["note"].split()[2]
    assert {r["note"].split()[2] for r in releases} == {lost_id}  # only the killed replica's
    assert {o.request_id for o in cut} <= {r["request_id"] for r in releases}
    outcomes += cut

    # The books: balance = ledger sum = credits minus what the answers reported, to the micro-USD.
    by_request = nets(rows)
    held_by_lost = {r["request_id"] for r in rows if r["kind"] == "reserve" and r["note"] == lost_id}
    released_ids = {r["request_id"] for r in releases}
    answered = {o.request_id: o for o in outcomes if o.ok}
    undercharged = 0
    for request_id, net in by_request.items():
        outcome = answered.get(request_id)
        if outcome is not None and request_id not in released_ids:
            assert net == -(outcome.cost or 0), (request_id, net, outcome)
        elif outcome is not None:  # answered, and its settlement died with the replica
            assert request_id in held_by_lost and net == 0
            undercharged += outcome.cost or 0
        else:  # failed or refused: nothing charged
            assert net == 0, (request_id, net)
    assert set(answered) <= set(by_request)
    for name, account_id in accounts.items():
        shown = account(admin, account_id)
        mine = [r for r in rows if r["account_id"] == account_id]
        reported = sum(o.cost or 0 for o in outcomes if o.ok and o.key == name)
        lost_answers = sum(answered[r].cost or 0 for r in released_ids & set(answered) if answered[r].key == name)
        assert shown["balance_micros"] == sum(r["amount_micros"] for r in mine)
        assert shown["balance_micros"] == CREDITS - reported + lost_answers
        assert shown["month_reserved_micros"] == 0

    # Limits held across the replicas.
    rpm_calls = fleet.upstream.calls["rpm"]
    assert sum(o.ok for o in outcomes if o.key == "rpm") <= rpm_calls <= RPM + elapsed * RPM / 60 + 1
    assert [o for o in outcomes if o.key == "rpm" and o.error == "429"], "the rpm limit must have bound"
    assert fleet.upstream.most["conc"] <= MAX_CONCURRENT
    assert fleet.upstream.most["conc"] == MAX_CONCURRENT, "the concurrency limit must have bound"
    admin.close()
    print(
        f"\nlost node: {len(outcomes)} calls, {sum(o.ok for o in outcomes)} answered, {len(failed)} failed by "
        f"the kill, {len(releases)} reservations released {released_after:.2f}s after it (bound {BOUND_S:.1f}s), "
        f"{undercharged} micro-USD answered but not charged"
    )
