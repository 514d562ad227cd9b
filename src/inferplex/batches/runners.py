"""What runs one line: a registry from a batch's endpoint to the call its route would make, in-process.

Each runner gets the line's body as the caller wrote it and answers the endpoint's OpenAI-shaped body, with
the gateway's `cost` added as its route adds it; a refusal or a provider's failure is the `GatewayError` the
route would have rendered, which the worker writes as the line's error (its status and OpenAI's error object).
The pipeline handed in is the worker's (its guard defers settlement: batches/deferring.py), so metering,
limits, processors, routing and fallbacks are the routes' own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from inferplex.accounts.guard import add_cost
from inferplex.batches.lines import CHECKS
from inferplex.canonical import ChatRequest, EmbeddingRequest
from inferplex.context import Context
from inferplex.errors import InvalidRequest
from inferplex.families.embeddings import EMBEDDINGS
from inferplex.gateway_request import parse_request
from inferplex.pipeline import Pipeline
from inferplex.responses_api.wire import ResponsesRequest


@dataclass(frozen=True, slots=True)
class Env:
    """What runners call: the worker's pipeline, and the Responses service on it (None: not configured)."""

    pipeline: Pipeline
    responses: Any = None


Runner = Callable[[Env, Context, dict[str, Any]], Awaitable[dict[str, Any]]]


async def chat(env: Env, ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    response = await env.pipeline.chat(parse_request(ChatRequest, body), ctx)
    add_cost(response, ctx)
    return dict(response)


async def embeddings(env: Env, ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    response = await env.pipeline.run(EMBEDDINGS, ctx, parse_request(EmbeddingRequest, body))
    add_cost(response, ctx)
    return dict(response)


async def responses(env: Env, ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    """`/v1/responses`: the Responses service's buffered answer (stored when the body asks, as its route)."""
    if env.responses is None:
        raise InvalidRequest("The Responses API is not available on this gateway.", param="url")
    service = env.responses.with_pipeline(env.pipeline)
    answer: dict[str, Any] = await service.respond(ctx, parse_request(ResponsesRequest, body))
    return answer


RUNNERS: dict[str, Runner] = {
    "/v1/chat/completions": chat,
    "/v1/embeddings": embeddings,
    "/v1/responses": responses,
}


def register(endpoint: str, runner: Runner, check: Callable[[dict[str, Any]], None]) -> None:
    """Batches of another dialect's route, run its way: `check` parses a line's body at creation (raising
    ValueError or GatewayError), `runner` runs it. Anthropic's Message Batches register `/v1/messages`
    (dialects/anthropic/batches.py), whose lines must reach an OpenAI-compatible upstream without the
    Anthropic-only fields, as `/v1/messages` sends them."""
    RUNNERS[endpoint] = runner
    CHECKS[endpoint] = check
