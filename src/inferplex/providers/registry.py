"""Provider kinds are plugins: entry points in the `inferplex.providers` group, built-ins included.

A kind's entry point is a factory `create(provider_config, resources) -> Adapter`. Registering the built-in
kinds the same way as third-party ones (as simonw/llm does) keeps the core free of `if kind == ...`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from inferplex.config import ProviderConfig
from inferplex.providers.base import Adapter

Factory = Callable[[ProviderConfig, Any], Adapter]

_BUILTIN = {
    "openai": "inferplex.providers.openai_compat:create",
    "local": "inferplex.providers.local:create",
    "anthropic": "inferplex.providers.anthropic:create",
    "gemini": "inferplex.providers.gemini:create",
    "azure": "inferplex.providers.azure:create",
    "bedrock": "inferplex.providers.bedrock:create",
}


@cache
def _entry_points() -> dict[str, str]:
    found = dict(_BUILTIN)
    for ep in entry_points(group="inferplex.providers"):
        found[ep.name] = ep.value
    return found


def known_kinds() -> set[str]:
    return set(_entry_points())


def load_factory(kind: str) -> Factory:
    module_name, _, attr = _entry_points()[kind].partition(":")
    module = __import__(module_name, fromlist=[attr])
    factory: Factory = getattr(module, attr)
    return factory
