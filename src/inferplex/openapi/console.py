"""Placeholder (issue 24, helper E1): the console routes (sign-in, keys, accounts) in /openapi.json."""

from __future__ import annotations

from inferplex.openapi.spec import Operation

OPERATIONS: list[Operation] = []
