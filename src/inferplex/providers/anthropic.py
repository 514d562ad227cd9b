"""The Anthropic Messages API adapter: `x-api-key` + `anthropic-version`, buffered, streamed, token counts.

Translation lives in `translate/openai_to_anthropic.py`; this module only moves bytes and declares what
Anthropic's failures mean (`ERRORS`: an HTTP 529 or `overloaded_error` is a retryable 503, and every typed
error, in a body or as an `error` event mid-stream, maps by its type).
Provider options: `anthropic_version` (default 2023-06-01) and `json_schema: native | tool` (how
response_format json_schema is served: Anthropic's structured output, or a forced tool).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import aiohttp

from inferplex.canonical import ChatRequest
from inferplex.capabilities import E, ProviderCapabilities, R, Support
from inferplex.config import ProviderConfig, Timeouts
from inferplex.providers import http
from inferplex.providers.failures import ErrorMap
from inferplex.providers.native import NativeAdapter
from inferplex.responses import ChatCompletion, ChatCompletionChunk
from inferplex.targets import Target
from inferplex.translate import openai_to_anthropic as tr

CAPABILITIES = ProviderCapabilities(
    n=E,
    json_object=E,
    audio_input=R,
    logprobs=Support.DROPPED,
    seed=Support.DROPPED,
    frequency_penalty=Support.DROPPED,
    presence_penalty=Support.DROPPED,
    logit_bias=Support.DROPPED,
    openai_options=Support.DROPPED,
    notes=(
        "json_schema uses Anthropic's structured output (`output_config.format`); the provider option "
        "`json_schema: tool` serves it with a forced tool instead.",
        "`max_tokens` is required upstream: the model's `max_output` from the config is sent, else 4096.",
        "`cache_control` on content parts, tools and the request passes through; cache reads and writes are "
        "reported in usage.",
        "thinking blocks come back as `reasoning_content` (and `thinking_blocks`, to send back next turn).",
        "`reasoning_effort` becomes `thinking` with a token budget (translate/reasoning.py), added to max_tokens "
        "so the caller's output limit still applies to the visible answer.",
    ),
)
_TOOL_JSON = replace(CAPABILITIES, json_schema=E)

ERRORS = ErrorMap(
    overloaded_statuses=frozenset({529}),
    overloaded_types=frozenset({"overloaded_error"}),
    rate_limited_types=frozenset({"rate_limit_error"}),
    type_status={
        "invalid_request_error": 400,
        "authentication_error": 401,
        "permission_error": 403,
        "not_found_error": 404,
        "request_too_large": 413,
        "api_error": 500,
    },
)

DEFAULT_BASE_URL = "https://api.anthropic.com"
DEFAULT_VERSION = "2023-06-01"


class Anthropic(NativeAdapter):
    def __init__(self, config: ProviderConfig, session: aiohttp.ClientSession) -> None:
        self.config = config
        base = (config.base_url or DEFAULT_BASE_URL).rstrip("/").removesuffix("/v1")
        self._url = base + "/v1/messages"
        self._count_url = base + "/v1/messages/count_tokens"
        headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "anthropic-version": str(config.options.get("anthropic_version", DEFAULT_VERSION)),
        }
        if config.api_key is not None:
            headers["x-api-key"] = config.api_key.get_secret_value()
        headers.update(config.headers)
        self._headers = headers
        self._stream_headers = {**headers, "accept": "text/event-stream"}
        self._session = session
        self.capabilities = _TOOL_JSON if config.options.get("json_schema") == "tool" else CAPABILITIES
        self.errors = ERRORS.bind(config.name)

    @staticmethod
    def _with_betas(headers: dict[str, str], request: ChatRequest) -> dict[str, str]:
        """The caller's `anthropic-beta` flags (from the Anthropic dialect) join the configured ones."""
        wanted = tr.betas(request)
        if wanted is None:
            return headers
        configured = headers.get("anthropic-beta")
        return {**headers, "anthropic-beta": f"{configured},{wanted}" if configured else wanted}

    async def _post(
        self, url: str, body: dict[str, Any], request: ChatRequest, target: Target, timeouts: Timeouts | None
    ) -> Any:
        headers = self._with_betas(self._headers, request)
        data, _ = await http.post_json_within(target, timeouts, self._session, url, body, headers, self.errors)
        return data

    async def _chat_once(self, request: ChatRequest, target: Target, timeouts: Timeouts | None) -> ChatCompletion:
        body = tr.build_request(request, target.upstream_model, self.max_tokens(target), stream=False)
        data = await self._post(self._url, body, request, target, timeouts)
        return tr.to_completion(data, target.model.name)

    async def _stream_once(
        self, request: ChatRequest, target: Target, timeouts: Timeouts | None
    ) -> AsyncIterator[ChatCompletionChunk]:
        body = tr.build_request(request, target.upstream_model, self.max_tokens(target), stream=True)
        headers = self._with_betas(self._stream_headers, request)
        resp = await http.open_stream_within(target, timeouts, self._session, self._url, body, headers, self.errors)
        translator = tr.AnthropicStream(target.model.name)
        try:
            async for event_name, data in http.json_events(resp, self.errors):
                for chunk in translator.feed(event_name, data):
                    yield chunk
                if translator.done:
                    await http.ended(resp)  # the body's own end: the connection goes back to the pool
                    break
        finally:
            resp.close()
        if not translator.done:
            raise self.errors.malformed("ended the stream before it was complete")

    async def count_tokens(self, request: ChatRequest, target: Target) -> int:
        """The provider's own count of the request's input tokens (POST /v1/messages/count_tokens).

        Not an attempt the router makes, so it is bounded here, by the deployment's timeouts."""
        body = tr.build_request(request, target.upstream_model, 1, stream=False)
        for key in ("max_tokens", "stop_sequences", "temperature", "top_p", "top_k", "metadata", "service_tier"):
            body.pop(key, None)
        data = await self._post(self._count_url, body, request, target, None)
        count = data.get("input_tokens") if isinstance(data, dict) else None
        if not isinstance(count, int):
            raise self.errors.malformed("sent a token count without input_tokens")
        return count


def create(config: ProviderConfig, resources: Any) -> Anthropic:
    return Anthropic(config, resources.http)
