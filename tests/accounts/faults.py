"""Helpers for the fault-injection suites: concurrent load through the HTTP API, and the reconciliation
that must hold once a store outage is over (balance = ledger = credits - what the responses reported)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.accounts.conftest import Admin


def postgres_running() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


@dataclass(slots=True)
class Answer:
    status: int
    request_id: str | None
    cost: int | None  # x-inferplex-cost-micros, if the answer carried it
    body: Any
    seconds: float


@dataclass
class Load:
    """`clients` threads each sending chat requests, one after another, until `stop()`."""

    url: str
    key: str
    clients: int = 20
    body: dict[str, Any] = field(
        default_factory=lambda: {"model": "sleep-300", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    )
    timeout_s: float = 20
    answers: list[Answer] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)  # a client-side failure (a timeout): never expected

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(self.clients)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(self.timeout_s + 5)

    def _client(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=self.timeout_s) as client:
            while not self._stop.is_set():
                start = time.monotonic()
                try:
                    r = client.post("/v1/chat/completions", json=self.body)
                except httpx.HTTPError as exc:
                    with self._lock:
                        self.errors.append(exc)
                    continue
                cost = r.headers.get("x-inferplex-cost-micros")
                answer = Answer(
                    r.status_code,
                    r.headers.get("x-request-id"),
                    int(cost) if cost is not None else None,
                    r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text,
                    time.monotonic() - start,
                )
                with self._lock:
                    self.answers.append(answer)

    def count(self, status: int) -> int:
        return sum(1 for a in self.answers if a.status == status)


def wait_for(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def books(admin: Admin, account: str) -> dict[str, Any]:
    """What the admin API says about an account: balance, ledger sum, and the usage rows of its key."""
    r = admin.client.get(f"/admin/accounts/{account}/ledger", params={"limit": 10_000})
    assert r.status_code == 200, r.text
    ledger: list[dict[str, Any]] = r.json()["data"]
    rows = admin.usage(limit=10_000)
    return {
        "balance": admin.account(account)["balance_micros"],
        "ledger_sum": sum(e["amount_micros"] for e in ledger),
        "settled": sorted(e["request_id"] for e in ledger if e["kind"] == "settle"),
        "usage": sorted(r["request_id"] for r in rows if r["account_id"] == account and r["status"] == 200),
    }


def expected(load: Load, credits: int) -> dict[str, Any]:
    """What the books must say once converged: only answered requests cost anything, exactly what they
    reported, and each has one usage row."""
    answered = [a for a in load.answers if a.status == 200]
    assert all(a.cost is not None and a.request_id for a in answered)
    for a in load.answers:  # a refused request says so in the OpenAI dialect, and costs nothing
        if a.status != 200:
            assert a.status == 503, (a.status, a.body)
            assert isinstance(a.body, dict) and a.body["error"]["code"] == "store_unavailable", a.body
            assert a.cost in (None, 0)
    spent = sum(a.cost or 0 for a in answered)
    return {"balance": credits - spent, "ledger_sum": credits - spent, "usage": sorted(a.request_id for a in answered)}


def converged(admin: Admin, account: str, load: Load, credits: int, seconds: float = 15) -> dict[str, Any]:
    """The account's books once they match `expected` (or as they are after `seconds`)."""
    want = expected(load, credits)
    last: dict[str, Any] = {}

    def check() -> bool:
        nonlocal last
        last = books(admin, account)
        return all(last[k] == v for k, v in want.items())

    wait_for(check, seconds)
    return last
