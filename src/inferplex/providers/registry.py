"""Provider kinds are plugins (`provider_kinds`): this loads a kind's factory, which builds its adapter.

A kind's entry point is a factory `create(provider_config, resources) -> Adapter`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inferplex.config import ProviderConfig
from inferplex.provider_kinds import TABLE
from inferplex.providers.base import Adapter

Factory = Callable[[ProviderConfig, Any], Adapter]


def load_factory(kind: str) -> Factory:
    factory: Factory = TABLE.load(kind)
    return factory
