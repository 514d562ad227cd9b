"""`GET /metrics` in /openapi.json: the Prometheus text format, refused in the OpenAI error shape."""

from __future__ import annotations

from inferplex.dialects.openai_responses import OpenAIError
from inferplex.openapi.spec import Dialect, Operation

METRICS = Dialect("Metrics", OpenAIError)

OPERATIONS: list[Operation] = [
    Operation(
        "get",
        "/metrics",
        "Prometheus metrics (text format 0.0.4); needs the `metrics` or `admin` scope",
        METRICS,
        None,
        (401, 403, 404, 500),
        ok_media="text/plain",
        description=(
            "Every series the gateway keeps (docs/operate.md): OpenTelemetry's GenAI metrics and the gateway's "
            "own `inferplex_*`. 404 when metrics are off or served only on the separate listener "
            "(`observability.metrics.listen`)."
        ),
    ),
]
