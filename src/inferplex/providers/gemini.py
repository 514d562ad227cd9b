"""The Google Gemini adapter: generateContent and streamGenerateContent (`alt=sse`), `x-goog-api-key`.

Translation lives in `translate/openai_to_gemini.py`; this module moves bytes and declares what Gemini's
failures mean (`ERRORS`): its 503 UNAVAILABLE ("the model is overloaded") is a retryable 503 like
Anthropic's 529, and a stream's error maps by its `status`. `base_url` defaults to
https://generativelanguage.googleapis.com/v1beta; the deployment's `model` is the Gemini model id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp

from inferplex.canonical import ChatRequest
from inferplex.capabilities import N, ProviderCapabilities, Support
from inferplex.config import ProviderConfig, Timeouts
from inferplex.providers import http
from inferplex.providers.failures import ErrorMap
from inferplex.providers.gemini_images import GeminiImages
from inferplex.providers.gemini_speech import GeminiSpeech
from inferplex.providers.gemini_videos import GeminiVideos
from inferplex.providers.native import NativeAdapter
from inferplex.responses import ChatCompletion, ChatCompletionChunk
from inferplex.targets import Target
from inferplex.translate import openai_to_gemini as tr

CAPABILITIES = ProviderCapabilities(
    audio_input=N,
    parallel_tool_calls=Support.DROPPED,
    logprobs=Support.DROPPED,
    logit_bias=Support.DROPPED,
    openai_options=Support.DROPPED,
    thinking=Support.DROPPED,
    cache_control=Support.DROPPED,
    notes=(
        "json_schema becomes `responseMimeType: application/json` + `responseSchema` (types upper-cased, "
        "keywords Gemini does not accept removed).",
        "`reasoning_effort` becomes `thinkingConfig.thinkingBudget` (translate/reasoning.py).",
        "n > 1 is `candidateCount`; tool-call ids are minted by the gateway (Gemini's calls have none).",
        "safety finish reasons (SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII) and a blocked prompt "
        "become finish_reason `content_filter`.",
    ),
)

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"


ERRORS = ErrorMap(
    overloaded_statuses=frozenset({503}),
    overloaded_types=frozenset({"UNAVAILABLE"}),
    rate_limited_types=frozenset({"RESOURCE_EXHAUSTED"}),
    type_status={
        "INVALID_ARGUMENT": 400,
        "FAILED_PRECONDITION": 400,
        "UNAUTHENTICATED": 401,
        "PERMISSION_DENIED": 403,
        "NOT_FOUND": 404,
        "INTERNAL": 500,
        "DEADLINE_EXCEEDED": 504,
    },
)


class Gemini(NativeAdapter, GeminiImages, GeminiVideos, GeminiSpeech):
    def __init__(self, config: ProviderConfig, session: aiohttp.ClientSession) -> None:
        self.config = config
        self.capabilities = CAPABILITIES
        self.errors = ERRORS.bind(config.name)
        self._base = (config.base_url or DEFAULT_BASE_URL).rstrip("/")
        headers = {"content-type": "application/json", "accept": "application/json"}
        if config.api_key is not None:
            headers["x-goog-api-key"] = config.api_key.get_secret_value()
        headers.update(config.headers)
        self._headers = headers
        self._session = session

    def _url(self, model: str, method: str) -> str:
        return f"{self._base}/models/{quote(model, safe='')}:{method}"

    async def _chat_once(self, request: ChatRequest, target: Target, timeouts: Timeouts | None) -> ChatCompletion:
        body = tr.build_request(request)
        url = self._url(target.upstream_model, "generateContent")
        data, _ = await http.post_json_within(target, timeouts, self._session, url, body, self._headers, self.errors)
        return tr.to_completion(data, target.model.name)

    async def _stream_once(
        self, request: ChatRequest, target: Target, timeouts: Timeouts | None
    ) -> AsyncIterator[ChatCompletionChunk]:
        body = tr.build_request(request)
        url = self._url(target.upstream_model, "streamGenerateContent") + "?alt=sse"
        headers = {**self._headers, "accept": "text/event-stream"}
        resp = await http.open_stream_within(target, timeouts, self._session, url, body, headers, self.errors)
        translator = tr.GeminiStream(target.model.name)
        try:
            async for _, data in http.json_events(resp, self.errors):
                for chunk in translator.feed(data):
                    yield chunk
        finally:
            resp.close()
        if not translator.finished:
            raise self.errors.malformed("ended the stream before it was complete")
        yield translator.end()


def create(config: ProviderConfig, resources: Any) -> Gemini:
    return Gemini(config, resources.http)
