"""Starting and stopping the Responses API's service in the app's lifespan (app.py): the stored responses on
the accounts' database, and this replica's background worker."""

from __future__ import annotations

from typing import Any

from inferplex.config import Config
from inferplex.pipeline import Pipeline
from inferplex.responses_api.background import Background
from inferplex.responses_api.service import ResponsesService
from inferplex.responses_api.store import ResponseRows


async def start(config: Config, accounts: Any, pipeline: Pipeline, media: Any) -> ResponsesService:
    """The service (`services.responses`), its worker running; `aclose()` stops the worker."""
    service = ResponsesService(pipeline, ResponseRows(accounts.db), accounts.auth, config.responses, media)
    worker = Background(service)
    worker.start()
    service.closers.append(worker.aclose)
    return service
