"""Billing rules that behave correctly but that no test guarded (issue 19, item 21): each test here was seen
to fail with a one- or two-line change to the rule it names, so none of them can pass by accident. The
reservation (`n`, a dearer deployment), the settlement (the deployment's price, the flex tier's, cache reads
and writes at their own prices) and the rounding were guarded only by unit tests of helpers, or not at all.

The fake upstream counts a word as a token: "hi" is 1 prompt token, and the echo answer "echo: hi" is
2 completion tokens (1 with `max_tokens: 1`), so every cost below is worked out by hand from the prices.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from inferplex.canonical import ChatRequest
from inferplex.families.chat import estimate_prompt_tokens
from tests.accounts.conftest import Admin, billing_config
from tests.accounts.test_billing_http import assert_reconciles
from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

HI = [{"role": "user", "content": "hi"}]
ANTHROPIC_KEY = "sk-ant-guarded-billing"
Json = dict[str, Any]


def _model(name: str, pricing: Json, deployment: Json | None = None, **extra: Any) -> Json:
    return {
        "name": name,
        "deployments": [{"provider": "fake", "model": "gpt-echo", **(deployment or {})}],
        "max_output": 100,
        "pricing": pricing,
        **extra,
    }


@pytest.fixture(scope="module")
def claude() -> Iterator[FakeAnthropic]:
    """An Anthropic upstream: its `*cache*` models report 100 cache-read and 20 cache-write input tokens."""
    fake = FakeAnthropic(ANTHROPIC_KEY)
    fake.start()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GUARDED_ANTHROPIC_KEY", ANTHROPIC_KEY)
        yield fake
    fake.stop()


@pytest.fixture(scope="module")
def server(
    fake_openai: FakeOpenAI, claude: FakeAnthropic, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    config = billing_config(fake_openai, tmp_path_factory.mktemp("guarded-billing"))
    config["providers"].append(
        {"name": "claude", "kind": "anthropic", "base_url": claude.url, "api_key": "env:GUARDED_ANTHROPIC_KEY"}
    )
    config["models"] += [
        # cache reads at a tenth of the input price, writes at 1.25 times it (Anthropic's ratios)
        {
            "name": "cached",
            "deployments": [{"provider": "claude", "model": "claude-cache"}],
            "max_output": 100,
            "pricing": {"input": "1", "cached_input": "0.1", "cache_write": "1.25", "output": "5"},
        },
        # the deployment is dearer than the model's own list price: 10 against 1 per output token
        _model("dear-deployment", {"input": "0", "output": "1"}, {"pricing": {"input": "0", "output": "10"}}),
        # the flex tier at the model's level, and at the deployment's (which wins over the model's)
        _model("flexible", {"input": "0", "output": "4"}, flex_pricing={"input": "0", "output": "2"}),
        _model(
            "deployment-flex",
            {"input": "0", "output": "1"},
            {"pricing": {"input": "0", "output": "6"}, "flex_pricing": {"input": "0", "output": "3"}},
            flex_pricing={"input": "0", "output": "1"},
        ),
        # fractions of a micro-USD per token
        _model("quarter", {"input": "0.25", "output": "0.5"}),
        _model("tenth", {"input": "0.1", "output": "0.1"}),
        _model("free-echo", {"free": True}),
    ]
    with GatewayServer(config) as gw:
        yield gw


def post(server: GatewayServer, key: str, **body: Any) -> httpx.Response:
    payload = {"messages": HI, **body}
    return httpx.post(
        server.base_url + "/chat/completions", json=payload, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def charged(r: httpx.Response) -> int:
    """The cost the answer reports, checked to be the same in its body and its header."""
    assert r.status_code == 200, r.text
    micros: int = r.json()["cost"]["micros"]
    assert r.headers["x-inferplex-cost-micros"] == str(micros)
    return micros


def assert_insufficient(r: httpx.Response, worst_case: int) -> None:
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "insufficient_credits"
    assert f"may cost up to {worst_case} micro-USD" in r.json()["error"]["message"]


# ---- the worst case reserved before the call ---------------------------------------------------------------


def test_the_reservation_counts_every_choice(server: GatewayServer, admin: Admin) -> None:
    # `priced`: 3 micro-USD per output token, nothing per input token, max_output 100: one choice may cost 300.
    created = admin.create_key(credits_micros=300)
    assert_insufficient(post(server, created["key"], model="priced", n=3), 900)
    assert assert_reconciles(admin, created["account_id"]) == 300  # nothing reserved, nothing charged
    one = post(server, created["key"], model="priced")
    assert charged(one) == 6
    assert assert_reconciles(admin, created["account_id"]) == 294


def test_the_reservation_uses_the_deployments_price_when_it_is_higher(server: GatewayServer, admin: Admin) -> None:
    # 100 output tokens at most: 100 at the model's list price, 1,000 at the deployment's.
    created = admin.create_key(credits_micros=500)
    assert_insufficient(post(server, created["key"], model="dear-deployment"), 1000)
    assert assert_reconciles(admin, created["account_id"]) == 500


# ---- the settlement ----------------------------------------------------------------------------------------


def test_settlement_uses_the_deployments_price(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=10_000)
    r = post(server, created["key"], model="dear-deployment")
    assert r.json()["usage"]["completion_tokens"] == 2
    assert charged(r) == 20  # 2 tokens x 10, not x 1
    assert assert_reconciles(admin, created["account_id"]) == 10_000 - 20
    assert admin.usage(key_id=created["id"])[0]["cost_micros"] == 20


@pytest.mark.parametrize(
    "model,default_price,flex_price",
    [("flexible", 4, 2), ("deployment-flex", 6, 3)],
    ids=["model-flex", "deployment-flex"],
)
def test_settlement_uses_the_flex_price_on_the_flex_tier(
    server: GatewayServer, admin: Admin, model: str, default_price: int, flex_price: int
) -> None:
    created = admin.create_key(credits_micros=10_000)
    flex = post(server, created["key"], model=model, service_tier="flex")
    assert flex.headers["x-inferplex-service-tier"] == "flex"
    assert charged(flex) == 2 * flex_price
    default = post(server, created["key"], model=model)
    assert charged(default) == 2 * default_price
    assert assert_reconciles(admin, created["account_id"]) == 10_000 - 2 * flex_price - 2 * default_price


@pytest.mark.parametrize("model,flex_price", [("flexible", 2), ("deployment-flex", 3)], ids=["model", "deployment"])
def test_a_flex_streams_last_chunk_reports_the_flex_cost_it_is_charged(
    server: GatewayServer, admin: Admin, model: str, flex_price: int
) -> None:
    """A stream's last chunk carries its cost before settlement books it: both must use the tier's price."""
    created = admin.create_key(credits_micros=10_000)
    client = openai.OpenAI(base_url=server.base_url, api_key=created["key"], max_retries=0)
    chunks = list(
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
            service_tier="flex",
        )
    )
    last = chunks[-1].model_dump()
    assert last["usage"]["completion_tokens"] == 2
    assert last["cost"] == {"currency": "USD", "micros": 2 * flex_price}
    deadline = time.monotonic() + 10
    while assert_reconciles(admin, created["account_id"]) == 10_000 and time.monotonic() < deadline:
        time.sleep(0.02)  # a stream settles when it closes, just after its last chunk
    assert assert_reconciles(admin, created["account_id"]) == 10_000 - 2 * flex_price


# ---- cost rounding -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model,exact",
    [("quarter", "1 x 0.25 + 1 x 0.5 = 0.75"), ("tenth", "1 x 0.1 + 1 x 0.1 = 0.2")],
    ids=["quarter", "tenth"],
)
def test_a_fraction_of_a_micro_usd_is_rounded_up_once_per_request(
    server: GatewayServer, admin: Admin, model: str, exact: str
) -> None:
    """docs/accounts.md: the token classes are summed exactly, then rounded up once to a whole micro-USD.
    Each request costs 1 micro-USD (`exact` shows the sum): rounding down would make both free, rounding
    to nearest the second, and rounding each token class up would make the first cost 2."""
    created = admin.create_key(credits_micros=10_000)
    r = post(server, created["key"], model=model, max_tokens=1)
    assert r.json()["usage"]["prompt_tokens"] == 1 and r.json()["usage"]["completion_tokens"] == 1, exact
    assert charged(r) == 1
    assert assert_reconciles(admin, created["account_id"]) == 10_000 - 1
    assert admin.usage(key_id=created["id"])[0]["cost_micros"] == 1


def test_cached_and_cache_write_tokens_are_billed_at_their_own_prices(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=10_000)
    r = post(server, created["key"], model="cached")
    usage = r.json()["usage"]
    # 1 uncached input token ("hi") + 100 cache reads + 20 cache writes; "echo: hi" is 2 output tokens
    assert usage["prompt_tokens"] == 121 and usage["prompt_tokens_details"]["cached_tokens"] == 100, usage
    assert usage["completion_tokens"] == 2
    assert charged(r) == 1 * 1 + 100 * 0.1 + 20 * 1.25 + 2 * 5 == 46
    assert assert_reconciles(admin, created["account_id"]) == 10_000 - 46


# ---- tokens per minute -------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["priced", "free-echo"])
def test_output_tokens_count_against_the_tokens_per_minute(server: GatewayServer, admin: Admin, model: str) -> None:
    """`tpm` admits on the prompt estimate and charges the real output tokens afterwards. The limit holds two
    prompt estimates (and a one-token answer) but not two prompts and a long answer. On a free model nothing
    else makes settlement touch a store, so the output tokens must still reach the bucket."""
    messages = [{"role": "user", "content": "w " * 40}]  # echoed: 41 completion tokens
    prompt = estimate_prompt_tokens(ChatRequest.model_validate({"model": model, "messages": messages}))
    output = 41
    tpm = 2 * prompt + output // 2  # a margin of 20 tokens either way (the bucket refills ~tpm/60 a second)

    short = admin.create_key(credits_micros=10**6, tpm=tpm)["key"]
    for _ in range(2):
        r = post(server, short, model=model, messages=messages, max_tokens=1)
        assert r.status_code == 200, r.text

    long = admin.create_key(credits_micros=10**6, tpm=tpm)["key"]
    first = post(server, long, model=model, messages=messages)
    assert first.status_code == 200 and first.json()["usage"]["completion_tokens"] == output, first.text
    second = post(server, long, model=model, messages=messages)
    assert second.status_code == 429, second.text
    assert second.json()["error"]["code"] == "rate_limit_exceeded"
    assert f"{tpm} tokens per minute" in second.json()["error"]["message"]
    assert int(second.headers["retry-after"]) >= 1
