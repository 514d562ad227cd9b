"""The OpenAI dialect: `/v1/chat/completions`, `/v1/embeddings`, `/v1/models`, `/v1/endpoints`.

Parsing is the canonical request itself (OpenAI's shape is canonical), with the gateway's own options taken
out first (`gateway_request.parse_request`, shared by every OpenAI-shaped dialect); rendering adds the gateway's
`timings`, strips the usage chunk from streams whose caller did not ask for it, and turns a failure after
the first byte into an OpenAI error chunk followed by `[DONE]`, never a silent cut.

Inferada's clients share `/v1/chat/completions`: a request carrying the `inferada` extension that omits
`stream` is streamed (`processors.chain.stream_by_default`), and a stream that waited for a concurrency slot
says how long in `x-inferada-queued-ms` too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.accounts.guard import add_cost
from inferplex.canonical import ChatRequest, EmbeddingRequest
from inferplex.config import ModelConfig, Pricing
from inferplex.context import Context
from inferplex.dialects import (
    inferada_audio,
    openai_audio,
    openai_batches,
    openai_files,
    openai_images,
    openai_responses_api,
    openai_videos,
)
from inferplex.dialects.answer import answer, answer_chat
from inferplex.dialects.failure import error_headers, stream_failure
from inferplex.dialects.registry import Dialect, Rendering
from inferplex.edge import Handler, endpoint, json_response, read_json
from inferplex.errors import GatewayError, NotFound
from inferplex.families.chat import CHAT
from inferplex.families.embeddings import EMBEDDINGS
from inferplex.gateway_request import GatewayRequest, parse_request
from inferplex.media_store import routes as media_routes
from inferplex.pipeline import ChatStream
from inferplex.processors.chain import stream_by_default
from inferplex.responses import ChatCompletion, ChatCompletionChunk, EmbeddingList, Timings
from inferplex.services import Services
from inferplex.sse import DONE, encode
from inferplex.streaming import SSEResponse


def render_error(err: GatewayError, ctx: Context) -> Response:
    return json_response(err.to_openai(), error_headers(err, ctx), err.status)


def _timing_headers(ctx: Context, stream: bool, t: Timings | None = None) -> dict[str, str]:
    """The response headers, with `t` (the body's timings, when already computed) as x-inferplex-* values."""
    if t is None:
        t = ctx.timings.as_dict(ctx.completion_tokens, stream=stream)
    headers = ctx.headers()
    for key in ("total_ms", "upstream_ms", "gateway_ms", "ttft_ms"):
        if key in t:
            headers["x-inferplex-" + key.replace("_", "-")] = f"{t[key]:.2f}"
    return headers


async def render_stream(stream: ChatStream, want_usage: bool) -> AsyncIterator[bytes]:
    """OpenAI SSE frames from canonical chunks. The chunk with finish_reason is held until the usage chunk
    (which follows it at once) so that it can carry the final `timings`."""
    ctx = stream.ctx
    held: ChatCompletionChunk | None = None
    try:
        async for chunk in stream:
            if not chunk.get("choices") and chunk.get("usage") is not None:
                if want_usage:
                    if held is not None:
                        yield encode(orjson.dumps(held))
                        held = None
                    chunk["timings"] = ctx.timings.as_dict(ctx.completion_tokens, stream=True)
                    add_cost(chunk, ctx)
                    yield encode(orjson.dumps(chunk))
                continue
            if not want_usage:
                chunk.pop("usage", None)
            if held is not None:
                yield encode(orjson.dumps(held))
                held = None
            if any(c.get("finish_reason") for c in chunk.get("choices") or ()):
                held = chunk
            else:
                yield encode(orjson.dumps(chunk))
        if held is not None:
            held["timings"] = ctx.timings.as_dict(ctx.completion_tokens, stream=True)
            add_cost(held, ctx)
            yield encode(orjson.dumps(held))
    except Exception as exc:
        if held is not None:
            yield encode(orjson.dumps(held))
        yield encode(orjson.dumps(stream_failure(exc, ctx).to_openai()))
    finally:
        await stream.aclose()
    yield DONE


async def chat_completions(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    data = await read_json(request, services.max_body_bytes, services.json_limits)
    parsed = parse_request(ChatRequest, data)
    if parsed.body.stream is None and parsed.options.processors.inferada:
        parsed = stream_by_default(parsed, ctx.principal)
    return await answer_chat(DIALECT, services, parsed, ctx)


async def embeddings(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    data = await read_json(request, services.max_body_bytes, services.json_limits)
    return await answer(DIALECT, EMBEDDINGS, services, parse_request(EmbeddingRequest, data), ctx)


def _chat_result(response: ChatCompletion, request: GatewayRequest[ChatRequest], ctx: Context) -> Response:
    timings = response["timings"] = ctx.timings.as_dict(ctx.completion_tokens)
    add_cost(response, ctx)
    return json_response(response, _timing_headers(ctx, stream=False, t=timings))


def _chat_stream(stream: ChatStream, request: GatewayRequest[ChatRequest], ctx: Context) -> Response:
    headers = _timing_headers(ctx, stream=True)
    if ctx.timings.queued_ms > 0:  # Inferada's name for x-inferplex-queued-ms, on streams as it publishes
        headers["x-inferada-queued-ms"] = f"{ctx.timings.queued_ms:.2f}"
    return SSEResponse(render_stream(stream, request.body.wants_usage), headers)  # type: ignore[return-value]


def _embeddings_result(response: EmbeddingList, request: GatewayRequest[EmbeddingRequest], ctx: Context) -> Response:
    timings = response["timings"] = ctx.timings.as_dict()
    add_cost(response, ctx)
    return json_response(response, _timing_headers(ctx, stream=False, t=timings))


# How the OpenAI-shaped dialects (this one, Unify's, InferExchange's) answer each family.
RENDERS = {
    CHAT.name: Rendering(_chat_result, _chat_stream),
    EMBEDDINGS.name: Rendering(_embeddings_result),
    **openai_audio.RENDERS,
    **openai_images.RENDERS,
    **openai_videos.RENDERS,
}


def price_card(p: Pricing) -> dict[str, Any]:
    """A model's prices as the model cards show them: USD per million tokens, as decimal strings (exact)."""
    return {
        "currency": "USD",
        "unit": "per_million_tokens",
        "input": str(p.input),
        "output": str(p.output),
        "cached_input": None if p.cached_input is None else str(p.cached_input),
        "free": p.free,
    }


def model_card(services: Services, model: ModelConfig) -> dict[str, Any]:
    targets = services.pipeline.catalog.targets(model)
    return {
        "id": model.name,
        "object": "model",
        "created": model.created,
        "owned_by": targets[0].provider.name,
        "display_name": model.display_name or model.name,
        "description": model.description or "",
        "type": model.type,
        "context_window": model.context_window,
        "max_output_tokens": model.max_output,
        "capabilities": model.capabilities.model_dump(),
        "pricing": price_card(model.pricing),
        "providers": sorted({t.provider.name for t in targets}),
        "locations": sorted({t.location for t in targets}),
    }


def model_handlers(card: Callable[[Services, ModelConfig], dict[str, Any]]) -> tuple[Handler, Handler]:
    """`GET /models` and `GET /models/{id}` in OpenAI's list shape, with `card` for each model the caller may
    use: the OpenAI-shaped dialects differ only in their cards (InferExchange's pricing, say)."""

    async def list_models(request: Request, ctx: Context) -> Response:
        services: Services = request.app.state.services
        data = [card(services, m) for m in services.pipeline.catalog.models if ctx.principal.may_use(m.name)]
        return json_response({"object": "list", "data": data}, ctx.headers())

    async def get_model(request: Request, ctx: Context) -> Response:
        services: Services = request.app.state.services
        model_id = request.path_params["model_id"]
        for m in services.pipeline.catalog.models:
            if m.name == model_id and ctx.principal.may_use(m.name):
                return json_response(card(services, m), ctx.headers())
        raise NotFound(f"The model `{model_id}` does not exist or you do not have access to it.", param="model")

    return list_models, get_model


list_models, get_model = model_handlers(model_card)


def endpoint_rows(services: Services) -> list[dict[str, Any]]:
    rows = []
    for m in services.pipeline.catalog.models:
        card = model_card(services, m)
        for t in services.pipeline.catalog.targets(m):
            rows.append(
                {
                    "id": f"{m.name}@{t.provider.name}",
                    "object": "endpoint",
                    "model": m.name,
                    "provider": t.provider.name,
                    "upstream_model": t.upstream_model,
                    "location": t.location,
                    "type": m.type,
                    "context_window": m.context_window,
                    "max_output_tokens": m.max_output,
                    "pricing": card["pricing"],
                    "limits": {
                        "rpm": t.deployment.rpm,
                        "tpm": t.deployment.tpm,
                        "max_concurrent": t.deployment.max_concurrent,
                    },
                }
            )
    return rows


async def list_endpoints(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    rows = [r for r in endpoint_rows(services) if ctx.principal.may_use(r["model"])]
    model = request.query_params.get("model")
    provider = request.query_params.get("provider")
    rows = [
        r for r in rows if (model is None or r["model"] == model) and (provider is None or r["provider"] == provider)
    ]
    return json_response({"object": "list", "data": rows}, ctx.headers())


routes = [
    Route("/v1/chat/completions", endpoint(render_error, chat_completions, "chat"), methods=["POST"]),
    Route("/v1/embeddings", endpoint(render_error, embeddings, "embeddings"), methods=["POST"]),
    Route("/v1/models", endpoint(render_error, list_models, "models:read"), methods=["GET"]),
    Route("/v1/models/{model_id:path}", endpoint(render_error, get_model, "models:read"), methods=["GET"]),
    Route("/v1/endpoints", endpoint(render_error, list_endpoints, "models:read"), methods=["GET"]),
    *inferada_audio.routes,  # OpenAI's audio routes, with Inferada's rules for its clients
    *openai_images.routes,
    *openai_videos.routes,
    *media_routes.routes,
    *openai_responses_api.routes,  # the Responses API (responses_api/, issue 23)
    *openai_files.routes,
    *openai_batches.routes,
]


def _error_body(err: GatewayError) -> dict[str, Any]:
    return err.to_openai()


DIALECT = Dialect("openai", routes, render_error, _error_body, ("/v1/",), RENDERS)
