"""Routing decisions as tables: strategies, retry verdicts and waits, the breaker, request options, prices."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest

from inferplex.canonical import ChatRequest
from inferplex.catalog import Catalog
from inferplex.config import CooldownConfig, parse_config
from inferplex.errors import (
    ContextLengthExceeded,
    GatewayError,
    InvalidRequest,
    RateLimited,
    Unavailable,
    UpstreamError,
    UpstreamTimeout,
)
from inferplex.gateway_request import GatewayRequest, parse_request
from inferplex.providers.failures import UpstreamOverloaded
from inferplex.routing.cooldown import Breaker, Gate
from inferplex.routing.options import ProviderPrefs, route_options
from inferplex.routing.pricing import price_for
from inferplex.routing.retry import Verdict, backoff, classify, wait_before_retry
from inferplex.routing.strategies import Candidate, apply_order, rank

A = Candidate("a", weight=1, priority=2, price=3.0, in_flight=4, ttft_ms=50, per_token_ms=1)
B = Candidate("b", weight=1, priority=1, price=1.0, in_flight=0, ttft_ms=300, per_token_ms=5)
C = Candidate("c", weight=1, priority=3, price=2.0, in_flight=2, ttft_ms=None, per_token_ms=None)


@pytest.mark.parametrize(
    "strategy,cands,first",
    [
        ("least_busy", [A, B, C], "b"),
        ("lowest_cost", [A, B, C], "b"),
        ("priority", [A, B, C], "b"),
        ("lowest_latency", [A, B], "a"),
        ("lowest_latency", [A, B, C], "c"),  # never measured: tried first, once
        ("throughput", [A, B], "a"),
    ],
)
def test_rank_puts_the_best_candidate_first(strategy: str, cands: list[Candidate], first: str) -> None:
    # seed 3's first draw is above the 5% exploration share, so the strategy itself decides
    assert rank(cands, strategy, random.Random(3))[0].key == first


def test_weighted_order_never_picks_zero_weight_first_and_keeps_everyone() -> None:
    rng = random.Random(1)
    cands = [Candidate("z", weight=0), Candidate("w", weight=5)]
    for _ in range(200):
        order = rank(cands, "weighted", rng)
        assert [c.key for c in order] == ["w", "z"]


def test_unknown_strategy_is_an_error() -> None:
    with pytest.raises(ValueError):
        rank([A], "fastest", random.Random(0))


def test_apply_order_puts_named_providers_first_in_that_order() -> None:
    ranked = [A, B, C]
    providers = {"a": "p1", "b": "p2", "c": "p3"}
    assert [c.key for c in apply_order(ranked, ["p3", "p2"], providers)] == ["c", "b", "a"]
    assert apply_order(ranked, [], providers) == ranked


@pytest.mark.parametrize(
    "err,verdict",
    [
        (UpstreamError("reset"), Verdict.RETRY),  # connection-level: no status
        (UpstreamError("x", upstream_status=500), Verdict.RETRY),
        (UpstreamError("x", upstream_status=502), Verdict.RETRY),
        (UpstreamError("x", upstream_status=503), Verdict.RETRY),
        (UpstreamError("x", upstream_status=529), Verdict.RETRY),
        (UpstreamOverloaded("x", upstream_status=529), Verdict.RETRY),
        (RateLimited("x", code="upstream_rate_limited"), Verdict.RETRY),
        (UpstreamTimeout("x", upstream_status=504), Verdict.FAILOVER),
        (UpstreamTimeout("slow"), Verdict.FAILOVER),
        (UpstreamError("bad key upstream", upstream_status=401), Verdict.FAILOVER),
        (Unavailable("model file missing"), Verdict.FAILOVER),
        (InvalidRequest("bad param"), Verdict.FATAL),
        (ContextLengthExceeded("too long"), Verdict.FATAL),
        (GatewayError("gateway refused", status=403), Verdict.FATAL),
        (RuntimeError("bug"), Verdict.FATAL),
    ],
)
def test_classify(err: BaseException, verdict: Verdict) -> None:
    assert classify(err) is verdict


def test_backoff_grows_exponentially_within_jitter_and_cap() -> None:
    rng = random.Random(0)
    for n, ceiling in [(1, 0.2), (2, 0.4), (3, 0.8), (6, 5.0), (10, 5.0)]:
        for _ in range(50):
            assert ceiling / 2 <= backoff(n, 0.2, 5.0, rng) <= ceiling


@pytest.mark.parametrize(
    "retry_after,max_wait,expected",
    [(None, 5.0, "backoff"), (1.5, 5.0, 1.5), (0.01, 5.0, "backoff"), (7.0, 5.0, None)],
)
def test_wait_before_retry_honours_retry_after_within_limit(
    retry_after: float | None, max_wait: float, expected: Any
) -> None:
    wait = wait_before_retry(1, retry_after, 0.2, 5.0, max_wait, random.Random(0))
    if expected == "backoff":
        assert wait is not None and 0.1 <= wait <= 0.2
    else:
        assert wait == expected


POLICY = CooldownConfig(failures=3, window=10, period=5)


def test_breaker_opens_after_failures_in_window_then_probes_once_and_closes() -> None:
    b = Breaker()
    assert b.check(0, POLICY).gate is Gate.CLOSED
    assert not b.failure(0, POLICY) and not b.failure(1, POLICY)
    assert b.failure(2, POLICY)  # third within 10 s: open
    assert b.check(3, POLICY) == b.check(3, POLICY) and b.check(3, POLICY).gate is Gate.OPEN
    assert b.check(3, POLICY).retry_in == pytest.approx(4)
    assert not b.failure(4, POLICY)  # in-flight failures while open change nothing
    assert b.check(7, POLICY).gate is Gate.PROBE  # half-open: the first caller probes
    assert b.check(7.5, POLICY).gate is Gate.OPEN  # everyone else waits for the probe
    b.success(8)
    assert b.check(8, POLICY).gate is Gate.CLOSED


def test_breaker_failed_probe_reopens_and_old_failures_expire() -> None:
    b = Breaker()
    for t in (0, 1, 2):
        b.failure(t, POLICY)
    assert b.check(7, POLICY).gate is Gate.PROBE
    assert b.failure(7.2, POLICY)  # the probe failed: open again for a full period
    assert b.check(12, POLICY).gate is Gate.OPEN and b.check(12.3, POLICY).gate is Gate.PROBE
    b.success(12.5)
    b.failure(20, POLICY)
    b.failure(25, POLICY)
    assert not b.failure(31, POLICY)  # the one at 20 left the 10 s window


def _req(**extra: Any) -> GatewayRequest[ChatRequest]:
    return parse_request(ChatRequest, {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra})


def test_route_options_read_every_routing_field() -> None:
    opts = route_options(
        _req(
            provider={
                "order": ["a", "b"],
                "only": ["a", "b"],
                "ignore": ["c"],
                "sort": "price",
                "allow_fallbacks": False,
            },
            models=["x", "y"],
            endpoint_id="ep-1",
            service_tier="flex",
            region="eu",
            timeout=12,
            stream=True,
        )
    )
    assert opts.prefs == ProviderPrefs(("a", "b"), ("a", "b"), ("c",), "price", False)
    assert (opts.models, opts.endpoint_id, opts.service_tier, opts.region, opts.timeout, opts.stream) == (
        ("x", "y"),
        "ep-1",
        "flex",
        "eu",
        12,
        True,
    )
    assert route_options(_req(provider="openai")).prefs == ProviderPrefs()
    assert route_options(_req(service_tier="auto")).service_tier == "default"


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"service_tier": "priority"}, "service_tier"),
        ({"provider": {"sort": "cheapest"}}, "provider.sort"),
        ({"provider": {"order": "openai"}}, "provider.order"),
        ({"provider": {"only": [1]}}, "provider.only"),
        ({"provider": {"allow_fallbacks": "no"}}, "provider.allow_fallbacks"),
        ({"models": [""]}, "models"),
    ],
)
def test_route_options_name_the_bad_field(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        route_options(_req(**extra))
    assert info.value.param == param and info.value.status == 400


def test_prices_deployment_over_model_and_flex_tier() -> None:
    config = parse_config(
        {
            "providers": [{"name": "p", "base_url": "http://x/v1"}],
            "models": [
                {
                    "name": "m",
                    "pricing": {"input": "1", "output": "2"},
                    "flex_pricing": {"input": "0.5", "output": "1"},
                    "deployments": [
                        {"provider": "p", "model": "u1"},
                        {"provider": "p", "model": "u2", "pricing": {"input": "3", "output": "4"}},
                        {
                            "provider": "p",
                            "model": "u3",
                            "pricing": {"input": "3", "output": "4"},
                            "flex_pricing": {"input": "1", "output": "1"},
                        },
                    ],
                }
            ],
        }
    )
    t1, t2, t3 = Catalog(config).resolve("m").targets
    rows = [
        (t1, "default", "1"),
        (t1, "flex", "0.5"),
        (t2, "default", "3"),
        (t2, "flex", "3"),  # its own price, no flex price of its own: the model's flex price does not apply
        (t3, "flex", "1"),
    ]
    for target, tier, expected in rows:
        assert price_for(target, tier).input == Decimal(expected)


@pytest.mark.parametrize(
    "routing,deployments,message",
    [
        ({"fallbacks": ["nope"]}, [{"provider": "p", "model": "u"}], "unknown fallback model"),
        ({}, [{"provider": "p", "model": "u", "id": "x"}, {"provider": "p", "model": "v", "id": "x"}], "duplicate"),
        ({"strategy": "fastest"}, [{"provider": "p", "model": "u"}], "strategy"),
    ],
)
def test_config_refuses_bad_routing(routing: dict[str, Any], deployments: list[Any], message: str) -> None:
    from inferplex.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        parse_config(
            {
                "providers": [{"name": "p", "base_url": "http://x/v1"}],
                "models": [{"name": "m", "routing": routing, "deployments": deployments}],
            }
        )
