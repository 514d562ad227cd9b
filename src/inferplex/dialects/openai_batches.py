"""placeholder: filled in by issue 23."""

from __future__ import annotations

from starlette.routing import Route

routes: list[Route] = []
