"""Cache settings that contradict themselves or the rest of the configuration are refused when the file is
loaded (`inferplex config check` and `serve` alike: cache/checks.problems), each with what to change."""

from __future__ import annotations

from typing import Any

import pytest

from inferplex.cache.wiring import backend_choice
from inferplex.config import ConfigError, parse_config

CHAT = {"name": "c", "deployments": [{"provider": "p", "model": "m"}]}
EMBED = {"name": "e", "type": "embedding", "deployments": [{"provider": "p", "model": "m"}]}


def config(cache: dict[str, Any], models: list[dict[str, Any]] | None = None, **rest: Any) -> Any:
    return parse_config(
        {
            "providers": [{"name": "p", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"}],
            "models": models or [CHAT, EMBED],
            "cache": {"enabled": True, **cache},
            **rest,
        }
    )


# (cache section, models, other sections, what the refusal says; None: accepted)
CASES: list[tuple[dict[str, Any], list[dict[str, Any]] | None, dict[str, Any], str | None]] = [
    ({}, None, {}, None),
    ({"backend": "redis"}, None, {}, "needs cache.redis_url or storage.redis_url"),
    ({"backend": "redis"}, None, {"storage": {"redis_url": "redis://127.0.0.1:6379/0"}}, None),
    ({"backend": "memory", "max_bytes": 4096, "max_entry_bytes": 8192}, None, {}, "could never be kept"),
    ({"replay": {"pace": "fixed"}}, None, {}, "interval_ms above 0"),
    ({"replay": {"pace": "fixed", "interval_ms": 20}}, None, {}, None),
    ({"semantic": {"embedding_model": "c"}}, None, {}, "is not a model of type embedding"),
    ({"semantic": {"embedding_model": "e"}}, None, {}, None),
    ({}, [{**CHAT, "cache": {"enabled": False, "shared": True}}], {}, "enabled is false, yet"),
    ({}, [{**CHAT, "cache": {"semantic": True}}, {**EMBED, "cache": {"semantic": True}}], {}, "only chat models"),
]


@pytest.mark.parametrize(("cache", "models", "rest", "said"), CASES)
def test_problems(
    cache: dict[str, Any], models: list[dict[str, Any]] | None, rest: dict[str, Any], said: str | None
) -> None:
    if said is None:
        config(cache, models, **rest)
        return
    with pytest.raises(ConfigError) as refused:
        config(cache, models, **rest)
    assert said in str(refused.value) and "cache" in str(refused.value)


# (cache section, other sections, the backend chosen)
CHOICES: list[tuple[dict[str, Any], dict[str, Any], str]] = [
    ({}, {}, "sqlite"),  # the embedded default: the store is SQLite
    ({}, {"storage": {"redis_url": "redis://127.0.0.1:6379/0"}}, "redis"),
    ({"redis_url": "redis://127.0.0.1:6379/1"}, {}, "redis"),
    ({}, {"storage": {"database_url": "postgresql+asyncpg://u@127.0.0.1/db"}}, "memory"),
    ({"backend": "memory"}, {"storage": {"redis_url": "redis://127.0.0.1:6379/0"}}, "memory"),
    ({"backend": "sqlite", "sqlite_path": "/tmp/x.sqlite3"}, {}, "sqlite"),
]


@pytest.mark.parametrize(("cache", "rest", "chosen"), CHOICES)
def test_backend_choice(cache: dict[str, Any], rest: dict[str, Any], chosen: str) -> None:
    name, where = backend_choice(config(cache, **rest))
    assert name == chosen
    if chosen == "sqlite":
        assert where is not None and where.endswith(".sqlite3")
