"""The AWS Bedrock adapter: Converse and ConverseStream, SigV4-signed, the binary event stream decoded.

Signing and event-stream decoding are botocore's (`SigV4Auth`, `EventStreamBuffer`; install the `bedrock`
extra); translation lives in `translate/openai_to_bedrock.py`. Credentials come from botocore's usual chain
(environment, shared config and profiles, container and instance roles) unless the provider has an
`api_key`, which is sent as a Bedrock API key (`Authorization: Bearer`) instead of signing.

Options: `region` (else AWS_REGION / AWS_DEFAULT_REGION), `profile` (an AWS config profile).
`base_url` defaults to https://bedrock-runtime.{region}.amazonaws.com.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import aiohttp
import orjson
import yarl

from inferplex.canonical import ChatRequest
from inferplex.capabilities import D, E, ProviderCapabilities
from inferplex.config import ConfigError, ProviderConfig, Timeouts
from inferplex.errors import GatewayError, Unavailable
from inferplex.providers import http
from inferplex.providers.bedrock_images import BedrockImages
from inferplex.providers.bedrock_videos import BedrockVideos
from inferplex.providers.failures import ErrorMap, ProviderFailure
from inferplex.providers.native import NativeAdapter
from inferplex.responses import ChatCompletion, ChatCompletionChunk
from inferplex.targets import Target
from inferplex.translate import openai_to_bedrock as tr

CAPABILITIES = ProviderCapabilities(
    n=E,
    json_schema=E,
    json_object=E,
    parallel_tool_calls=D,
    logprobs=D,
    seed=D,
    frequency_penalty=D,
    presence_penalty=D,
    logit_bias=D,
    reasoning_effort=D,
    openai_options=D,
    notes=(
        "one Converse translation for every model family (Anthropic, Meta Llama, Mistral, ...); a model's "
        "`capabilities` in the config say which of tools and vision it has.",
        "json_schema and json_object are served by a forced tool (Converse has no JSON mode).",
        "images must be base64 data URLs (Converse takes bytes, not links); `cache_control` becomes a "
        "`cachePoint` block.",
        "Anthropic models also get `top_k` and `thinking` through `additionalModelRequestFields`, and "
        "`cache_control`; other families drop them (named, or a 400 with `drop_params: false`).",
    ),
)
_OTHER_FAMILIES = replace(CAPABILITIES, top_k=D, thinking=D, cache_control=D)

ERRORS = ErrorMap(
    overloaded_statuses=frozenset({503, 529}),
    overloaded_types=frozenset({"ServiceUnavailableException", "ModelNotReadyException"}),
    rate_limited_types=frozenset({"ThrottlingException"}),
    type_status={
        "ValidationException": 400,
        "AccessDeniedException": 403,
        "ResourceNotFoundException": 404,
        "InternalServerException": 500,
        "ModelStreamErrorException": 500,
        "ModelTimeoutException": 504,
    },
)


class Bedrock(NativeAdapter, BedrockImages, BedrockVideos):
    def __init__(self, config: ProviderConfig, session: aiohttp.ClientSession) -> None:
        try:
            import botocore.session  # type: ignore[import-untyped]  # noqa: F401  (fail at start-up, naming the fix)
        except ImportError:
            raise ConfigError(
                f"provider {config.name}: kind bedrock needs botocore: pip install 'inferplex[bedrock]'"
            ) from None
        self.config = config
        self.capabilities = CAPABILITIES
        self.errors = ERRORS.bind(config.name)
        region = config.options.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if not region:
            raise ConfigError(f"provider {config.name}: set options.region (or AWS_REGION) for Bedrock")
        self.region = str(region)
        self._base = (config.base_url or f"https://bedrock-runtime.{self.region}.amazonaws.com").rstrip("/")
        self._session = session
        self._credentials: Any = None

    def capabilities_for(self, target: Target) -> ProviderCapabilities:
        """Anthropic's own details (top_k, thinking, cache_control) reach the Anthropic family only."""
        return CAPABILITIES if tr.family(target.upstream_model) == "anthropic" else _OTHER_FAMILIES

    def _url(self, model_id: str, action: str) -> str:
        # yarl encodes each segment once (an ARN's "/" becomes %2F) and this exact string is what is signed
        return str(yarl.URL(self._base) / "model" / model_id / action)

    def _signed_headers(self, url: str, payload: bytes, accept: str) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": accept, **self.config.headers}
        if self.config.api_key is not None:
            return {**headers, "authorization": "Bearer " + self.config.api_key.get_secret_value()}
        from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
        from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]

        if self._credentials is None:
            import botocore.session

            boto = botocore.session.Session(profile=self.config.options.get("profile"))
            self._credentials = boto.get_credentials()
            if self._credentials is None:
                raise Unavailable(f"provider {self.config.name}: no AWS credentials found")
        request = AWSRequest(method="POST", url=url, data=payload, headers=headers)
        SigV4Auth(self._credentials.get_frozen_credentials(), "bedrock", self.region).add_auth(request)
        return dict(request.headers.items())

    async def _chat_once(self, request: ChatRequest, target: Target, timeouts: Timeouts | None) -> ChatCompletion:
        body = tr.build_request(request, target.upstream_model, self.max_tokens(target))
        url = self._url(target.upstream_model, "converse")
        headers = self._signed_headers(url, orjson.dumps(body), "application/json")
        data, _ = await http.post_json_within(target, timeouts, self._session, url, body, headers, self.errors)
        return tr.to_completion(data, target.model.name)

    async def _stream_once(
        self, request: ChatRequest, target: Target, timeouts: Timeouts | None
    ) -> AsyncIterator[ChatCompletionChunk]:
        from botocore.eventstream import EventStreamBuffer  # type: ignore[import-untyped]

        body = tr.build_request(request, target.upstream_model, self.max_tokens(target))
        url = self._url(target.upstream_model, "converse-stream")
        headers = self._signed_headers(url, orjson.dumps(body), "application/vnd.amazon.eventstream")
        resp = await http.open_stream_within(target, timeouts, self._session, url, body, headers, self.errors)
        translator = tr.BedrockStream(target.model.name)
        buffer = EventStreamBuffer()
        try:
            async for data in resp.content.iter_any():
                buffer.add_data(data)
                for message in buffer:
                    h = message.headers
                    kind = str(h.get(":message-type", "event"))
                    event = str(h.get(":exception-type") or h.get(":event-type") or "")
                    try:
                        payload = orjson.loads(message.payload) if message.payload else {}
                    except orjson.JSONDecodeError as exc:
                        raise self.errors.malformed("sent a stream event that is not JSON") from exc
                    for chunk in translator.feed(event, payload, kind):
                        yield chunk
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self.errors.transport(exc) from exc
        except (GatewayError, ProviderFailure):
            raise
        except Exception as exc:  # botocore's decoder rejects a corrupt frame (bad CRC, bad length)
            message = f"provider {self.config.name} sent a corrupt event stream: {exc}"
            raise self.errors.typed("api_error", message) from exc
        finally:
            resp.close()
        if not translator.done:
            raise self.errors.malformed("ended the stream before it was complete")


def create(config: ProviderConfig, resources: Any) -> Bedrock:
    return Bedrock(config, resources.http)
