"""Placeholder (issue 24): the tracing sink. Replaced by its owner."""

from __future__ import annotations

from inferplex.config import Config
from inferplex.observe.hub import Sink


def sink(config: Config) -> Sink | None:
    return None
