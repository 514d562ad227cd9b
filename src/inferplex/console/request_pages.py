"""Placeholder (issue 24, helper E2: the request log and one request). Replaced by its owner."""

from __future__ import annotations

from starlette.routing import Route

ROUTES: list[Route] = []
