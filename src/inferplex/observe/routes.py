"""Placeholder (issue 24): the observability routes (`GET /metrics`). Replaced by its owner."""

from __future__ import annotations

from starlette.routing import Route

ROUTES: list[Route] = []
