"""Placeholder (issue 24, helper E2: usage charts and CSV). Replaced by its owner."""

from __future__ import annotations

from starlette.routing import Route

ROUTES: list[Route] = []
