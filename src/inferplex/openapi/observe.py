"""Placeholder (issue 24): the observe routes in /openapi.json. Replaced by its owner."""

from __future__ import annotations

from inferplex.openapi.spec import Operation

OPERATIONS: list[Operation] = []
