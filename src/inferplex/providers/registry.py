"""Provider kinds are plugins: entry points in the `inferplex.providers` group, built-ins included.

A kind's entry point is a factory `create(provider_config, resources) -> Adapter`. Registering the built-in
kinds the same way as third-party ones (as simonw/llm does) keeps the core free of `if kind == ...`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferplex.config import ProviderConfig
from inferplex.plugins import PluginTable
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


_TABLE = PluginTable("inferplex.providers", _BUILTIN)


def known_kinds() -> set[str]:
    return set(_TABLE.names())


def load_factory(kind: str) -> Factory:
    factory: Factory = _TABLE.load(kind)
    return factory
