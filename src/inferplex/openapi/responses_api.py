"""placeholder: filled in by issue 23."""

from __future__ import annotations

from inferplex.openapi.spec import Operation

OPERATIONS: tuple[Operation, ...] = ()
