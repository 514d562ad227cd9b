"""Placeholder (issue 24, helper E2): the console's usage, request-log and provider pages in /openapi.json."""

from __future__ import annotations

from inferplex.openapi.spec import Operation

OPERATIONS: list[Operation] = []
