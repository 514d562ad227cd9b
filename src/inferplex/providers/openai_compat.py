"""The adapter for every OpenAI-compatible upstream (OpenAI, Groq, vLLM, Ollama, ...).

Translation is nearly the identity: the caller's own JSON (`GatewayRequest.wire()`, the gateway's own keys
already out) is forwarded with the upstream model id swapped in and the vendor profile's renames and drops
applied, so fields the gateway does not know reach the upstream untouched. Streams always ask for usage, so
every stream can be metered; the pipeline hides that chunk from callers who did not ask for it.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from yarl import URL

from inferplex.canonical import ChatRequest, EmbeddingRequest
from inferplex.capabilities import Plan, plan
from inferplex.config import Capabilities, ConfigError, ProviderConfig
from inferplex.emulation import run_stream
from inferplex.errors import UpstreamError
from inferplex.gateway_request import GatewayRequest
from inferplex.providers import http
from inferplex.providers.base import CallInfo
from inferplex.providers.failures import OPENAI
from inferplex.providers.openai_audio import OpenAIAudio
from inferplex.providers.openai_caps import CAPABILITIES
from inferplex.providers.openai_images import OpenAIImages
from inferplex.providers.openai_responses import OpenAIResponses
from inferplex.providers.openai_videos import OpenAIVideos
from inferplex.providers.profiles import PROFILES, VendorProfile, profile_for
from inferplex.responses import ChatCompletion, ChatCompletionChunk, EmbeddingList
from inferplex.targets import Target


def build_chat_body(
    wire: Mapping[str, Any], upstream_model: str, profile: VendorProfile, *, stream: bool
) -> tuple[dict[str, Any], list[str]]:
    """The upstream request body and the parameters dropped for this vendor. `wire` is the request's
    `wire()`: the gateway's own keys are already out (gateway_request.py), and it is not mutated."""
    body = dict(wire)
    body["model"] = upstream_model
    if stream:
        body["stream"] = True
        if profile.stream_usage_option:
            options = dict(body.get("stream_options") or {})
            options["include_usage"] = True
            body["stream_options"] = options
    dropped = [k for k in profile.unsupported if k in body]
    for k in dropped:
        del body[k]
    for ours, theirs in profile.renames.items():
        if ours in body:
            value = body.pop(ours)
            body.setdefault(theirs, value)
    return body, sorted(dropped)


# What an upstream's JSON decodes to, its object read as the answer it should be: declared so, an
# `isinstance(x, dict)` check narrows it to the TypedDict with no cast (a TypedDict is a plain dict).
_Answer = ChatCompletion | list[Any] | str | float | bool | None
_Event = ChatCompletionChunk | list[Any] | str | float | bool | None
_Embeddings = EmbeddingList | list[Any] | str | float | bool | None


def normalize_completion(data: _Answer, public_model: str) -> ChatCompletion:
    """Give an upstream's completion OpenAI's exact shape: every key a strict client reads is present."""
    if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
        raise UpstreamError("the provider's response has no choices")
    data["model"] = public_model
    data.setdefault("object", "chat.completion")
    for i, choice in enumerate(data["choices"]):
        choice.setdefault("index", i)
        message = choice.setdefault("message", {})
        message.setdefault("role", "assistant")
        message.setdefault("content", None)
        message.setdefault("refusal", None)
        choice.setdefault("logprobs", None)
        choice.setdefault("finish_reason", "stop")
    return data


class OpenAICompatible(OpenAIAudio, OpenAIImages, OpenAIVideos, OpenAIResponses):
    def __init__(self, config: ProviderConfig, session: aiohttp.ClientSession) -> None:
        if config.profile is not None and config.profile not in PROFILES:
            raise ConfigError(
                f"provider {config.name}: unknown profile {config.profile!r} (known: {', '.join(sorted(PROFILES))})"
            )
        self.config = config
        self.profile = profile_for(config.profile, config.name)
        base = config.base_url or self.profile.base_url
        if base is None:
            raise ConfigError(f"provider {config.name}: base_url is required")
        # Parsed once: aiohttp parses a string URL again on every request.
        self._chat_url = URL(base.rstrip("/") + "/chat/completions")
        self._embed_url = URL(base.rstrip("/") + "/embeddings")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if config.api_key:
            headers[self.profile.auth_header] = self.profile.auth_prefix + config.api_key.get_secret_value()
        headers.update(config.headers)
        self._headers = headers
        self._stream_headers = {**headers, "Accept": "text/event-stream"}
        self._session = session
        self.errors = OPENAI.bind(config.name)

    def _auth(self, headers: dict[str, str], info: CallInfo) -> dict[str, str]:
        """The headers with the caller's own key for this provider in place of ours, when they sent one."""
        key = info.caller_key
        if key is None or key.provider != self.config.name:
            return headers
        return {**headers, self.profile.auth_header: self.profile.auth_prefix + key.secret}

    def _plan(
        self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo, *, stream: bool
    ) -> tuple[Plan | None, GatewayRequest[ChatRequest]]:
        """Narrow the request to what the model declares it can do and the vendor takes (its profile's
        `unsupported` fields, decided by `capabilities.plan` like every provider's); skipped when nothing
        could be narrowed, which for a profile without drops costs one test."""
        rejected = self.profile.unsupported
        present = [k for k in rejected if k in request.wire()] if rejected else ()
        if not present and not needs_plan(request.body, target.model.capabilities, stream=stream):
            return None, request
        decided = plan(
            request,
            CAPABILITIES,
            target.model.capabilities,
            provider_name=target.provider.name,
            model_name=target.model.name,
            stream=stream,
            unsupported=present,
        )
        info.dropped_params = sorted({*info.dropped_params, *decided.dropped})
        return decided, decided.apply(request)

    async def chat(self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo) -> ChatCompletion:
        _, request = self._plan(request, target, info, stream=False)
        return await self._send(request, target, info)

    def chat_stream(
        self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo
    ) -> AsyncIterator[ChatCompletionChunk]:
        decided, request = self._plan(request, target, info, stream=True)
        if decided is not None and decided.buffered_stream:
            # The model declares `streaming: false`: one buffered call, replayed as a stream.
            planned = request
            return run_stream(decided, lambda r: self._send(_buffered(planned, r), target, info), _no_stream)
        return self._send_stream(request, target, info)

    async def _send(self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo) -> ChatCompletion:
        body, dropped = build_chat_body(request.wire(), target.upstream_model, self.profile, stream=False)
        info.dropped_params = sorted({*info.dropped_params, *dropped})
        headers, timeouts = self._auth(self._headers, info), info.timeouts
        if timeouts is None:  # not the router's attempt: bounded here
            data, _ = await http.post_json_within(
                target, None, self._session, self._chat_url, body, headers, self.errors
            )
        else:  # the fast path: `post_json_within`'s frame spared
            data, _ = await http.post_json(self._session, self._chat_url, body, headers, timeouts, self.errors)
        return normalize_completion(data, target.model.name)

    async def _send_stream(
        self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo
    ) -> AsyncIterator[ChatCompletionChunk]:
        body, dropped = build_chat_body(request.wire(), target.upstream_model, self.profile, stream=True)
        info.dropped_params = sorted({*info.dropped_params, *dropped})
        headers, timeouts = self._auth(self._stream_headers, info), info.timeouts
        if timeouts is None:
            resp = await http.open_stream_within(
                target, None, self._session, self._chat_url, body, headers, self.errors
            )
        else:
            resp = await http.open_stream(self._session, self._chat_url, body, headers, timeouts, self.errors)
        public = target.model.name
        done = False
        chunk: _Event
        stream_id: str | None = None
        held: list[
            ChatCompletionChunk
        ] = []  # chunks sent before the stream's id is known (Azure's prompt-filter chunk)
        try:
            async for _, chunk in http.json_events(resp, self.errors):
                if chunk is http.DONE:
                    done = True
                    break
                if not isinstance(chunk, dict):
                    continue
                if "error" in chunk and "choices" not in chunk:
                    raise self.errors.event(chunk)
                chunk["model"] = public
                if not chunk.get("id"):  # one id for the whole stream, as a client expects
                    if stream_id is None:
                        held.append(chunk)
                        continue
                    chunk["id"] = stream_id
                elif stream_id is None:
                    stream_id = chunk["id"]
                    for early in _identified(held, chunk):
                        yield early
                    held.clear()
                yield chunk
            if held:  # no chunk had an id (the id is made only then: a system call per stream otherwise)
                for early in _identified(held, {"id": "chatcmpl-" + secrets.token_hex(12)}):
                    yield early
        finally:
            resp.close()
        if not done:
            raise self.errors.malformed("ended the stream before it was complete")

    async def embed(self, request: GatewayRequest[EmbeddingRequest], target: Target, info: CallInfo) -> EmbeddingList:
        body = dict(request.wire())
        body["model"] = target.upstream_model
        url, headers = self._embed_url, self._headers
        data: _Embeddings
        data, _ = await http.post_json_within(target, info.timeouts, self._session, url, body, headers, self.errors)
        if not isinstance(data, dict) or not isinstance(data.get("data"), list):
            raise self.errors.malformed("sent an embeddings response without data")
        data["model"] = target.model.name
        return data

    async def aclose(self) -> None:
        """The HTTP session is shared and closed by the app."""


def _identified(held: list[ChatCompletionChunk], first: ChatCompletionChunk) -> list[ChatCompletionChunk]:
    """Chunks that came before the first one with an id (Azure opens a stream with `"id": ""` and only the
    prompt's filter results), given that chunk's id, `object` and `created`."""
    for chunk in held:
        chunk["id"], chunk["object"] = first["id"], first.get("object") or "chat.completion.chunk"
        chunk["created"] = chunk.get("created") or first.get("created", 0)
    return held


def needs_plan(request: ChatRequest, caps: Capabilities, *, stream: bool) -> bool:
    """Whether the model's declared capabilities could change this request (cheap: the common case is no)."""
    if request.tools and not caps.tools:
        return True
    if request.response_format is not None and request.response_format.type != "text" and not caps.json_schema:
        return True
    if stream and not caps.streaming:
        return True
    return not caps.vision and any(isinstance(m.content, list) for m in request.messages)


def _buffered(request: GatewayRequest[ChatRequest], body: ChatRequest) -> GatewayRequest[ChatRequest]:
    """The request as one buffered call (`body` is the emulation's: json tool, one of n): no stream fields."""
    return request.replace(body.model_copy(update={"stream": None, "stream_options": None}))


async def _no_stream(request: ChatRequest) -> AsyncIterator[ChatCompletionChunk]:
    raise AssertionError("a buffered stream makes no streamed call")
    yield {}  # pragma: no cover


def create(config: ProviderConfig, resources: Any) -> OpenAICompatible:
    return OpenAICompatible(config, resources.http)
