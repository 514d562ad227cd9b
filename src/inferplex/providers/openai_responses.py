"""OpenAI's Responses API on upstreams that speak it themselves (OpenAI, Azure OpenAI): a mixin of
`OpenAICompatible` (providers/openai_compat.py) and of `AzureOpenAI` (providers/azure.py).

Most upstreams only chat, so `/v1/responses` is translated to chat for them (responses_api/translate.py).
An upstream that speaks Responses gets the request as the caller wrote it instead (responses_api/native.py),
hosted tools and all, and its answer and events come back untouched. Only the operator knows which
upstreams do (an OpenAI-compatible vendor may not), so it is an opt-in per provider: `options.responses_api:
true`. The body is built by the caller (native.py): the model id, the gateway's history, `store: false`.

- OpenAI-compatible: `POST {base_url}/responses`, with the vendor profile's auth header.
- Azure: `POST {base}/openai/v1/responses` (Azure's v1 API, the deployment name as `model`), or, with
  `options.responses_api_version`, the preview route `{base}/openai/responses?api-version=...`.

A buffered answer is the `response` object; a stream yields each event's JSON object (`type`,
`sequence_number`, ...). An `error` event, or a stream that ends without `response.completed`,
`response.incomplete` or `response.failed`, is the upstream's failure (`UpstreamError`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from yarl import URL

from inferplex.errors import UpstreamError
from inferplex.providers import http
from inferplex.providers.base import CallInfo
from inferplex.providers.openai_host import OpenAIHost
from inferplex.targets import Target

# The events that end a Responses stream: after one, nothing more comes.
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


@runtime_checkable
class ResponsesUpstream(Protocol):
    """An adapter that can send a Responses request upstream as it is. `speaks_responses` says whether this
    target's provider does (the operator's opt-in); the two calls are only made when it does."""

    def speaks_responses(self, target: Target) -> bool: ...

    async def responses(self, body: dict[str, Any], target: Target, info: CallInfo) -> dict[str, Any]:
        """The upstream's `response` object."""
        ...

    def responses_stream(self, body: dict[str, Any], target: Target, info: CallInfo) -> AsyncIterator[dict[str, Any]]:
        """The upstream's stream events, each a JSON object; raises `GatewayError` from the first pull if the
        upstream fails before its first event."""
        ...


def opted_in(options: Mapping[str, Any]) -> bool:
    """Whether a provider's `options` say its upstream speaks the Responses API."""
    return options.get("responses_api") is True


def event_error(data: Mapping[str, Any], provider: str) -> UpstreamError:
    """An `error` event (`{"type": "error", "code", "message", "param"}`) as the upstream's failure."""
    message = data.get("message") or (data.get("error") or {}).get("message")
    return UpstreamError(str(message or f"provider {provider} failed mid-stream"))


class OpenAIResponses(OpenAIHost):
    """`POST {base}/responses` on an OpenAI-compatible upstream, buffered and streamed."""

    def speaks_responses(self, target: Target) -> bool:
        return opted_in(self.config.options)

    def _responses_url(self) -> URL:
        """Beside the chat URL (`.../chat/completions` -> `.../responses`), with its query."""
        return self._chat_url.parent.parent / "responses" % dict(self._chat_url.query)

    async def responses(self, body: dict[str, Any], target: Target, info: CallInfo) -> dict[str, Any]:
        return await self._post_responses(self._responses_url(), body, target, info)

    def responses_stream(self, body: dict[str, Any], target: Target, info: CallInfo) -> AsyncIterator[dict[str, Any]]:
        return self._stream_responses(self._responses_url(), body, target, info)

    async def _post_responses(self, url: URL, body: dict[str, Any], target: Target, info: CallInfo) -> dict[str, Any]:
        headers = self._auth(self._headers, info)
        data, _ = await http.post_json_within(target, info.timeouts, self._session, url, body, headers, self.errors)
        if not isinstance(data, dict) or not isinstance(data.get("output"), list):
            raise self.errors.malformed("sent a response without output")
        return data

    async def _stream_responses(
        self, url: URL, body: dict[str, Any], target: Target, info: CallInfo
    ) -> AsyncIterator[dict[str, Any]]:
        headers = {**self._auth(self._headers, info), "Accept": "text/event-stream"}
        resp = await http.open_stream_within(target, info.timeouts, self._session, url, body, headers, self.errors)
        ended = False
        try:
            async for _, data in http.json_events(resp, self.errors):
                if data is http.DONE or not isinstance(data, dict):
                    continue
                kind = data.get("type")
                if kind == "error":
                    raise event_error(data, self.config.name)
                yield data
                if kind in TERMINAL:
                    ended = True
                    await http.ended(resp)  # the body's own end: the connection goes back to the pool
                    break
        finally:
            resp.close()
        if not ended:
            raise self.errors.malformed("ended the stream before the response was complete")


class AzureResponses:
    """The Responses API on Azure OpenAI: one URL for the resource (the deployment is the body's `model`),
    sent by the deployment's OpenAI-compatible adapter, which carries Azure's `api-key` header."""

    if TYPE_CHECKING:
        _base: str
        _config: Any

        def _for(self, target: Target) -> Any: ...  # AzureOpenAI's

    def speaks_responses(self, target: Target) -> bool:
        return opted_in(self._config.options)

    def _azure_responses_url(self) -> URL:
        version = self._config.options.get("responses_api_version")
        if version:
            return URL(f"{self._base}/openai/responses").with_query({"api-version": str(version)})
        return URL(f"{self._base}/openai/v1/responses")

    async def responses(self, body: dict[str, Any], target: Target, info: CallInfo) -> dict[str, Any]:
        deployment = self._for(target)
        return await deployment._post_responses(self._azure_responses_url(), body, target, info)  # type: ignore[no-any-return]

    def responses_stream(self, body: dict[str, Any], target: Target, info: CallInfo) -> AsyncIterator[dict[str, Any]]:
        deployment = self._for(target)
        return deployment._stream_responses(self._azure_responses_url(), body, target, info)  # type: ignore[no-any-return]
