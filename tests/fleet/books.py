"""The books of a fleet test, read through the admin API behind the load balancer."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import httpx

LOST = "released: replica "  # the note of a lost replica's released reservation (store/liveness.py)


def account(admin: httpx.Client, account_id: str) -> dict[str, Any]:
    r = admin.get(f"/admin/accounts/{account_id}")
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def ledger(admin: httpx.Client, account_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 10000}
    while True:
        r = admin.get(f"/admin/accounts/{account_id}/ledger", params=params)
        assert r.status_code == 200, r.text
        page = r.json()
        rows += page["data"]
        if not page.get("has_more"):
            return rows
        params["before"] = page["data"][-1]["id"]


def nets(rows: list[dict[str, Any]]) -> dict[str, int]:
    """What each request's ledger rows add up to (minus what it was charged)."""
    out: dict[str, int] = defaultdict(int)
    for row in rows:
        if row["request_id"] is not None:
            out[row["request_id"]] += row["amount_micros"]
    return dict(out)


def new_account(admin: httpx.Client, name: str, credits: int, **key: Any) -> tuple[str, str]:
    """An account holding `credits` and a key on it with `key`'s limits: (account id, key secret)."""
    r = admin.post("/admin/accounts", json={"name": name, "credits_micros": credits})
    assert r.status_code == 201, r.text
    account_id: str = r.json()["id"]
    r = admin.post("/admin/keys", json={"name": name, "account_id": account_id, **key})
    assert r.status_code == 201, r.text
    return account_id, r.json()["key"]


def settled(admin: httpx.Client, account_ids: list[str], timeout: float) -> float:
    """Wait until nothing is reserved on these accounts; when that was seen (UNIX seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        held = {a: account(admin, a)["month_reserved_micros"] for a in account_ids}
        if not any(held.values()):
            return time.time()
        assert time.monotonic() < deadline, f"still reserved after {timeout}s: {held}"
        time.sleep(0.2)
