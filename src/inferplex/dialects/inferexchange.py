"""The InferExchange dialect: `POST /api/v1/chat/completions` and `GET /api/v1/models`.

InferExchange's API is OpenAI's Chat Completions under another prefix (its docs say so, and its request,
response, stream and error shapes are OpenAI's), so its routes are the OpenAI dialect's own handlers
mounted at `/api/v1`: one pipeline, one renderer, and so one billing path (per token, from the usage the
provider reports). The models list is the OpenAI dialect's, whose cards carry each model's per-token
`pricing`, which is where InferExchange's docs send readers for prices.
"""

from __future__ import annotations

from starlette.routing import Route

from inferplex.dialects.openai import DIALECT as OPENAI
from inferplex.dialects.openai import chat_completions, get_model, list_models, render_error
from inferplex.dialects.registry import Dialect
from inferplex.edge import endpoint

routes = [
    Route(
        "/api/v1/chat/completions", endpoint(render_error, chat_completions, "chat", "inferexchange"), methods=["POST"]
    ),
    Route("/api/v1/models", endpoint(render_error, list_models, "models:read", "inferexchange"), methods=["GET"]),
    Route(
        "/api/v1/models/{model_id:path}",
        endpoint(render_error, get_model, "models:read", "inferexchange"),
        methods=["GET"],
    ),
]

DIALECT = Dialect("inferexchange", routes, render_error, OPENAI.error_body, ("/api/v1/",), OPENAI.renders)
