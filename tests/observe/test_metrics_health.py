"""`routing.health.snapshot`: what the console's providers page and the metrics' deployment gauges read."""

from __future__ import annotations

import asyncio

from inferplex.catalog import Catalog
from inferplex.config import parse_config
from inferplex.routing.cooldown import MemoryCooldowns
from inferplex.routing.health import snapshot
from inferplex.routing.router import Router

CONFIG = {
    "providers": [
        {"name": "oa", "kind": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "env:FAKE_UPSTREAM_KEY"},
        {"name": "claude", "kind": "anthropic", "api_key": "env:FAKE_UPSTREAM_KEY"},
    ],
    "models": [
        {
            "name": "chat",
            "deployments": [
                {"provider": "oa", "model": "gpt-x", "id": "a", "rpm": 10, "max_concurrent": 1},
                {"provider": "claude", "model": "claude-x"},
            ],
        },
        {"name": "also", "deployments": [{"provider": "claude", "model": "claude-x"}]},
    ],
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_row_per_deployment_of_each_model_with_breakers_read_not_probed() -> None:
    async def run() -> None:
        config = parse_config(CONFIG, "<test>")
        catalog = Catalog(config)
        clock = Clock()
        router = Router(catalog, MemoryCooldowns(clock))
        policy = config.models[0].routing.cooldown
        target = catalog.targets(config.models[0])[0]
        router.window(target).note_request()
        router.stats["a"].in_flight = 2
        router.stats["a"].observe_ttft(120.0)
        for _ in range(policy.failures):
            await router.cooldowns.failure("a", policy)

        rows = await snapshot(router)
        listed = [(r["model"], r["deployment"]) for r in rows]
        assert listed == [("chat", "a"), ("chat", "claude/claude-x"), ("also", "claude/claude-x")]
        first = rows[0]
        assert first["provider"] == "oa" and first["kind"] == "openai" and first["upstream_model"] == "gpt-x"
        assert first["breaker"] == "open" and first["retry_in_s"] == policy.period
        assert (first["in_flight"], first["ttft_ms"], first["per_token_ms"]) == (2, 120.0, None)
        assert (first["rpm_limit"], first["rpm_used"], first["tpm_used"], first["max_concurrent"]) == (10, 1, None, 1)
        assert first["queued"] == 0
        assert rows[1]["breaker"] == "closed" and rows[1]["rpm_used"] is None and rows[1]["in_flight"] == 0
        await router.cooldowns.failure("claude/claude-x", policy)  # one failure of three: still closed
        assert [r["breaker"] for r in await snapshot(router)] == ["open", "closed", "closed"]

        clock.now += policy.period  # the open period is over: half-open, and looking takes no probe
        assert (await snapshot(router))[0]["breaker"] == "half_open"
        assert (await snapshot(router))[0]["breaker"] == "half_open"
        assert (await router.cooldowns.check("a", policy)).gate.value == "probe"  # the probe is still there

    asyncio.run(run())
