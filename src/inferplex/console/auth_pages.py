"""Placeholder (issue 24, helper E1: sign-in, sign-out, the home page, static assets). Replaced by its owner."""

from __future__ import annotations

from starlette.routing import Route

ROUTES: list[Route] = []
