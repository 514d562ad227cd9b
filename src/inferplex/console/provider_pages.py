"""Placeholder (issue 24, helper E2: providers, deployments, models and prices). Replaced by its owner."""

from __future__ import annotations

from starlette.routing import Route

ROUTES: list[Route] = []
