"""Builds the hub from the configuration: one sink per part that is turned on."""

from __future__ import annotations

from inferplex.config import Config
from inferplex.observe import access_log, alerts, metrics, tracing
from inferplex.observe.hub import Hub, Sink


def build_hub(config: Config) -> Hub:
    made = (metrics.sink(config), tracing.sink(config), access_log.sink(config), alerts.sink(config))
    sinks: list[Sink] = [s for s in made if s is not None]
    return Hub(sinks)
