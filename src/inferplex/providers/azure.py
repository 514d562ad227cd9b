"""Azure OpenAI: the OpenAI-compatible adapter, pointed at deployment URLs and authenticated with `api-key`.

Azure serves OpenAI's wire format at `{base}/openai/deployments/{deployment}/chat/completions?api-version=...`,
so this module composes one `OpenAICompatible` per deployment (the deployment is a model's upstream id) and
only changes where it sends and which header carries the key. Azure's content-filter results
(`prompt_filter_results`, `content_filter_results`) and finish_reason `content_filter` pass through
untouched, as every unknown field does in the OpenAI-compatible adapter.

A model's declared `capabilities` (no tools, no vision, no streaming) are honoured by the composed
OpenAI-compatible adapter through `capabilities.plan`, as on the native adapters.
Options: `api_version` (default 2024-10-21).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import aiohttp

from inferplex.canonical import ChatRequest, EmbeddingRequest
from inferplex.capabilities import N, ProviderCapabilities
from inferplex.config import ConfigError, ProviderConfig
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from inferplex.providers.openai_audio import AzureAudio
from inferplex.providers.openai_compat import OpenAICompatible
from inferplex.providers.openai_images import AzureImages
from inferplex.providers.openai_responses import AzureResponses
from inferplex.responses import ChatCompletion, ChatCompletionChunk, EmbeddingList
from inferplex.targets import Target

CAPABILITIES = ProviderCapabilities(
    audio_input=N,
    notes=(
        "the OpenAI-compatible adapter at the deployment URL; Azure's content-filter annotations pass through "
        "and a filtered answer has finish_reason `content_filter`.",
    ),
)

DEFAULT_API_VERSION = "2024-10-21"


class _Deployment(OpenAICompatible):
    """The OpenAI-compatible adapter for one Azure deployment: same code, Azure's URLs."""

    def __init__(self, config: ProviderConfig, session: aiohttp.ClientSession, url: str, api_version: str) -> None:
        super().__init__(config.model_copy(update={"base_url": url, "profile": "openai"}), session)
        self._chat_url = self._chat_url.with_query({"api-version": api_version})
        self._embed_url = self._embed_url.with_query({"api-version": api_version})


class AzureOpenAI(AzureAudio, AzureImages, AzureResponses):
    def __init__(self, config: ProviderConfig, session: aiohttp.ClientSession) -> None:
        if not config.base_url:
            raise ConfigError(f"provider {config.name}: base_url (https://<resource>.openai.azure.com) is required")
        headers = dict(config.headers)
        if config.api_key is not None:
            headers["api-key"] = config.api_key.get_secret_value()
        # the key travels in `api-key`, so the composed adapter must not also send it as a bearer token
        self._config = config.model_copy(update={"api_key": None, "headers": headers})
        self._base = config.base_url.rstrip("/")
        self._version = str(config.options.get("api_version", DEFAULT_API_VERSION))
        self._session = session
        self._deployments: dict[str, _Deployment] = {}

    def _for(self, target: Target) -> _Deployment:
        name = target.upstream_model
        adapter = self._deployments.get(name)
        if adapter is None:
            url = f"{self._base}/openai/deployments/{quote(name, safe='')}"
            adapter = self._deployments[name] = _Deployment(self._config, self._session, url, self._version)
        return adapter

    async def chat(self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo) -> ChatCompletion:
        return await self._for(target).chat(request, target, info)

    def chat_stream(
        self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo
    ) -> AsyncIterator[ChatCompletionChunk]:
        return self._for(target).chat_stream(request, target, info)

    async def embed(self, request: GatewayRequest[EmbeddingRequest], target: Target, info: CallInfo) -> EmbeddingList:
        return await self._for(target).embed(request, target, info)

    async def aclose(self) -> None:
        """The HTTP session is shared and closed by the app."""


def create(config: ProviderConfig, resources: Any) -> AzureOpenAI:
    return AzureOpenAI(config, resources.http)
