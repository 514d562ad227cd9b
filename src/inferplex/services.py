"""What every route handler shares, built once in the app's lifespan: the pipeline, the authenticator and
the request-body limits.

Kept apart from `app.py` so that the dialects, which read these on every request, do not import the module
that assembles them from the dialects (the import graph has no cycles: tests/test_import_graph.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferplex.auth import Authenticator
from inferplex.config import ServerConfig
from inferplex.jobs.service import VideoJobs
from inferplex.json_limits import DEFAULT_LIMITS, JsonLimits
from inferplex.media_store.store import MediaStore
from inferplex.pipeline import Pipeline


@dataclass(slots=True)
class Services:
    """Hung on `app.state.services`: each handler reads the one object it needs from it."""

    pipeline: Pipeline
    auth: Authenticator
    max_body_bytes: int
    json_limits: JsonLimits = DEFAULT_LIMITS
    media: MediaStore | None = None  # media_store/: files, signed URLs, uploads (issue 22)
    jobs: VideoJobs | None = None  # jobs/: durable video jobs (issue 22)
    responses: Any = None  # responses_api/: the Responses API's service (issue 23)
    batches: Any = None  # batches/: the batch service (issue 23)


def json_limits(server: ServerConfig) -> JsonLimits:
    """The JSON body caps the server's configuration sets (docs/limits.md)."""
    return JsonLimits(server.max_json_depth, server.max_json_items, server.max_json_string_chars)
