"""Starting and stopping the batch service and its worker in the app's lifespan (app.py).

Every `inferplex serve` runs a worker unless `batches.worker` is false (a deployment that keeps batch work off
its serving replicas runs `inferplex worker` processes instead: the same lifespan without the HTTP server,
cli.py). Workers share nothing but the database, so any number of them can run at once."""

from __future__ import annotations

from typing import Any

from inferplex.batches.rows import BatchRows
from inferplex.batches.service import BatchService
from inferplex.batches.worker import BatchWorker
from inferplex.config import Config
from inferplex.media_store.store import MediaStore
from inferplex.pipeline import Pipeline


async def start(
    config: Config, accounts: Any, pipeline: Pipeline, media: MediaStore | None, responses: Any
) -> BatchService:
    """The service (`services.batches`), with this process's worker running when configured; `aclose()`
    stops the worker (the lines it was running are run again by whichever worker claims them next)."""
    rows = BatchRows(accounts.db)
    service = BatchService(rows, media, config.batches)
    if config.batches.worker:
        worker = BatchWorker(rows, pipeline, accounts.guard, accounts.auth, media, config.batches, responses)
        service.wake = worker.wake
        worker.start()
        service.closers.append(worker.aclose)
    return service
