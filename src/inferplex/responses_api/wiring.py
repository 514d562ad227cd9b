"""Starting and stopping the Responses API's service in the app's lifespan (app.py)."""

from __future__ import annotations

from typing import Any


class Stopped:
    """Placeholder until the service lands: nothing to start, nothing to close."""

    async def aclose(self) -> None:
        return None


async def start(config: Any, accounts: Any, pipeline: Any, media: Any) -> Any:
    return Stopped()
