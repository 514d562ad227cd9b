"""What a hit costs, through the ledger like any request: free by default, a fraction or the full price as
the operator sets per model, read back through the admin API (balance, ledger, usage rows)."""

from __future__ import annotations

import time

import pytest

from tests.accounts.conftest import Admin
from tests.cache.conftest import chat, sse_frames, unique
from tests.gateway_server import GatewayServer

CREDITS = 100_000


def settled_balance(admin: Admin, account_id: str, entries: int) -> int:
    """The account's balance once `entries` ledger rows are there (settlement is queued, not waited for),
    checked to be the sum of its ledger."""
    deadline = time.monotonic() + 10
    while len(admin.ledger(account_id)) < entries and time.monotonic() < deadline:
        time.sleep(0.05)
    balance: int = admin.account(account_id)["balance_micros"]
    assert balance == sum(e["amount_micros"] for e in admin.ledger(account_id))
    return balance


# (model, what the hit is charged of the answer's 12 micro-USD)
CHARGES = [("priced", 0), ("priced-fraction", 6), ("priced-full", 12)]


@pytest.mark.parametrize(("model", "charged"), CHARGES)
def test_a_hit_is_charged_as_configured(server: GatewayServer, admin: Admin, model: str, charged: int) -> None:
    created = admin.create_key(credits_micros=CREDITS)
    account, text = created["account_id"], unique()  # "tell me <id>": echoed as 4 tokens, 3 micro-USD each
    miss = chat(server, text, created["key"], model=model)
    assert miss.headers["x-inferplex-cache"] == "miss" and miss.json()["cost"]["micros"] == 12
    assert settled_balance(admin, account, 3) == CREDITS - 12  # topup, reserve, settle
    hit = chat(server, text, created["key"], model=model)
    assert hit.headers["x-inferplex-cache"] == "hit"
    assert hit.json()["cost"]["micros"] == charged and hit.headers["x-inferplex-cost-micros"] == str(charged)
    assert hit.json()["usage"]["completion_tokens"] == 4  # the stored usage, as the caller first saw it
    assert settled_balance(admin, account, 5) == CREDITS - 12 - charged
    kinds = [e["kind"] for e in admin.ledger(account)]
    assert kinds.count("reserve") == 2 and kinds.count("settle") == 2  # a hit is admitted and settled
    rows = admin.usage(key_id=created["id"])
    assert [r["cost_micros"] for r in rows[:2]] == [charged, 12]
    if "cache" in rows[0]:  # the usage row's cache column (issue 26's migration)
        assert [r["cache"] for r in rows[:2]] == ["hit", "miss"]


def test_a_replayed_stream_is_charged_as_configured(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=CREDITS)
    account, text = created["account_id"], unique()
    for _ in range(2):
        r, frames = sse_frames(server, text, created["key"], model="priced-fraction")
    assert r.headers["x-inferplex-cache"] == "hit" and frames[-1] == "[DONE]"
    assert settled_balance(admin, account, 5) == CREDITS - 12 - 6


def test_the_master_key_sees_what_a_hit_would_cost(server: GatewayServer) -> None:
    text = unique()
    chat(server, text, model="priced-full")
    hit = chat(server, text, model="priced-full")
    assert hit.headers["x-inferplex-cache"] == "hit" and hit.headers["x-inferplex-cost-micros"] == "12"


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
def test_a_hit_is_priced_as_the_deployment_that_answered(server: GatewayServer, admin: Admin, stream: bool) -> None:
    """A model priced only per deployment: a full-price hit costs what the deployment's answer cost (4 output
    tokens at 5 micro-USD), not the model's empty price."""
    created = admin.create_key(credits_micros=CREDITS)
    account, text = created["account_id"], unique()
    for expected in ("miss", "hit"):
        if stream:
            r, frames = sse_frames(server, text, created["key"], model="deployment-priced",
                                   stream_options={"include_usage": True})  # fmt: skip
            assert r.headers["x-inferplex-cache"] == expected and frames[-1] == "[DONE]"
        else:
            r = chat(server, text, created["key"], model="deployment-priced")
            assert r.headers["x-inferplex-cache"] == expected and r.json()["cost"]["micros"] == 20
    assert settled_balance(admin, account, 5) == CREDITS - 20 - 20
    assert [row["cost_micros"] for row in admin.usage(key_id=created["id"])[:2]] == [20, 20]
