"""Placeholder (issue 24, helper E1: keys). Replaced by its owner."""

from __future__ import annotations

from starlette.routing import Route

ROUTES: list[Route] = []
