"""The shared frame of every adapter whose provider speaks its own wire format (Anthropic, Gemini, Bedrock).

A native adapter writes two single-call methods (`_chat_once`, `_stream_once`) around its pure translators;
this frame asks `capabilities.plan` what the target can do, reports dropped parameters on the `CallInfo`,
runs the chosen emulations, and maps the `ProviderFailure`s its translators read with the adapter's
`ErrorMap` (`errors`), so no adapter decides those things for itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import ClassVar

from inferplex.canonical import ChatRequest
from inferplex.capabilities import Plan, ProviderCapabilities, plan
from inferplex.config import Timeouts
from inferplex.emulation import run_chat, run_stream
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from inferplex.providers.failures import ErrorMap, ProviderFailure
from inferplex.responses import ChatCompletion, ChatCompletionChunk
from inferplex.targets import Target


class NativeAdapter:
    capabilities: ProviderCapabilities
    errors: ErrorMap  # the module's declaration, bound to the configured provider's name
    default_max_tokens: ClassVar[int] = 4096

    def _plan(self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo, *, stream: bool) -> Plan:
        decided = plan(
            request,
            self.capabilities_for(target),
            target.model.capabilities,
            provider_name=target.provider.name,
            model_name=target.model.name,
            stream=stream,
        )
        info.dropped_params = sorted({*info.dropped_params, *decided.dropped})
        return decided

    def capabilities_for(self, target: Target) -> ProviderCapabilities:
        """What this adapter can do for `target`: its declaration, unless a model family changes it."""
        return self.capabilities

    def max_tokens(self, target: Target) -> int:
        """The output limit sent when the caller gave none: the model's configured maximum, else 4096."""
        return target.model.max_output or self.default_max_tokens

    async def chat(self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo) -> ChatCompletion:
        decided = self._plan(request, target, info, stream=False)
        timeouts = info.timeouts
        try:
            return await run_chat(decided, lambda r: self._chat_once(r, target, timeouts))
        except ProviderFailure as failure:
            raise self.errors.failure(failure) from failure

    async def chat_stream(
        self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo
    ) -> AsyncIterator[ChatCompletionChunk]:
        decided = self._plan(request, target, info, stream=True)
        timeouts = info.timeouts
        stream = run_stream(
            decided, lambda r: self._chat_once(r, target, timeouts), lambda r: self._stream_once(r, target, timeouts)
        )
        try:
            async for chunk in stream:
                yield chunk
        except ProviderFailure as failure:
            raise self.errors.failure(failure) from failure
        finally:
            await stream.aclose()

    async def _chat_once(self, request: ChatRequest, target: Target, timeouts: Timeouts | None) -> ChatCompletion:
        """One buffered call; `timeouts` is the attempt's (`CallInfo.timeouts`), None outside the router."""
        raise NotImplementedError

    def _stream_once(
        self, request: ChatRequest, target: Target, timeouts: Timeouts | None
    ) -> AsyncIterator[ChatCompletionChunk]:
        """One streamed call; `timeouts` as for `_chat_once`."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """The HTTP session is shared and closed by the app."""
