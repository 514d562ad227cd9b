"""What Unify's platform routes answer, for `/openapi.json` (the chat route's answers are OpenAI's).

Unify publishes these routes' parameters but not their answers' fields (its pages show `{}`), so every item
type here but `Credits` (`{"id", "credits"}`) and `EndpointMetric`'s five fields (what unifyai reads) is
the gateway's own choice, marked inferred in docs/dialects.md.
"""

from __future__ import annotations

from typing import Any

from pydantic import RootModel
from typing_extensions import TypedDict

from inferplex.dialects.openai_responses import OpenAIError


class ValidationProblem(TypedDict):
    loc: list[str | int]
    msg: str
    type: str


class UnifyDetail(TypedDict):
    detail: list[ValidationProblem] | str


class UnifyError(RootModel[UnifyDetail | OpenAIError]):
    """FastAPI's error body: a 422 lists every problem, any other status has a message. An error answered
    before the route runs (a malformed request head) takes the `/v0` prefix's shape, OpenAI's."""


class QueryItem(TypedDict):
    id: str
    endpoint: str
    timestamp: str
    status: int
    failed: bool
    tags: list[str]
    query_body: dict[str, Any] | None
    response_body: dict[str, Any] | None
    prompt_tokens: int
    completion_tokens: int
    cost: float
    latency_ms: float | None
    time_to_first_token_ms: float | None


class QueryLogged(TypedDict):
    info: str


class MetricsInterval(TypedDict):
    start_time: str
    end_time: str
    user_id: str | None
    request_count: int
    prompt_tokens: int
    completion_tokens: int
    generation_time_p50: float | None
    generation_time_p95: float | None
    tokens_per_second_p50: float | None
    tokens_per_second_p95: float | None


class EndpointMetric(TypedDict):
    time_to_first_token: float | None
    inter_token_latency: float | None
    input_cost: float
    output_cost: float
    measured_at: str
    requests: int


class Credits(TypedDict):
    id: str
    credits: float | None
