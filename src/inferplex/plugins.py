"""Plugin tables: built-in implementations plus whatever installed packages register as entry points.

Providers (`inferplex.providers`) and processors (`inferplex.processors`) are both found this way, so a
third-party package adds one by declaring an entry point, and the built-ins are registered no differently.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any


class PluginTable:
    def __init__(self, group: str, builtin: Mapping[str, str]) -> None:
        self.group = group
        self._builtin = dict(builtin)
        self._found: dict[str, str] | None = None
        self._loaded: dict[str, Any] = {}

    def names(self) -> dict[str, str]:
        """Name → `module:attribute`; installed entry points may add names or replace built-ins."""
        if self._found is None:
            found = dict(self._builtin)
            for ep in entry_points(group=self.group):
                found[ep.name] = ep.value
            self._found = found
        return self._found

    def load(self, name: str) -> Any:
        """The object a name refers to, imported on first use (a plugin nobody configures costs nothing)."""
        if name not in self._loaded:
            module_name, _, attr = self.names()[name].partition(":")
            self._loaded[name] = getattr(importlib.import_module(module_name), attr)
        return self._loaded[name]
