"""Custom endpoints at run time: `name@custom` resolved for the calling account, and called safely.

A custom endpoint is not in the catalog (the catalog is the operator's, built once; these are the accounts',
changed at any time), so the pipeline asks this object first for a model whose provider is `custom`
(`Pipeline.custom`). It finds the endpoint in the caller's own account (another account's endpoint of the
same name does not exist for it: 404), opens its key, and hands back a one-target `Resolved` whose provider
is this object's own adapter, `custom`: the OpenAI-compatible adapter, one per URL, on a session of its own
whose resolver connects only to checked addresses (addresses.py). The key travels as the request's
`CallInfo.caller_key`, for this request only, as Unify's `use_custom_keys` does.

Billing: a custom endpoint has no price anyone configured, and the caller pays its provider directly, so
it is free here (`Pricing(free=True)`): the guard reserves and charges nothing, and the usage log still
records the tokens (docs/dialects.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import orjson

from inferplex.canonical import ChatRequest
from inferplex.catalog import Resolved
from inferplex.config import CustomEndpointsConfig, DeploymentConfig, ModelConfig, Pricing, ProviderConfig
from inferplex.context import Context
from inferplex.custom_endpoints.addresses import AddressRefused, PinnedResolver, checked_addresses, split_url
from inferplex.custom_endpoints.sealing import SealBroken, Sealer
from inferplex.custom_endpoints.store import CustomStore
from inferplex.errors import InvalidRequest, NotFound, Unavailable
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallerKey, CallInfo
from inferplex.providers.openai_compat import OpenAICompatible
from inferplex.responses import ChatCompletion, ChatCompletionChunk
from inferplex.store.backend import Database
from inferplex.targets import Target

PROVIDER = "custom"
_MAX_ADAPTERS = 1024


class AddressNotAllowed(InvalidRequest):
    """A registered endpoint whose host now resolves where the gateway does not connect: never retried."""

    retryable = False
    code = "custom_endpoint_address_refused"


def owner_of(ctx: Context) -> str:
    """The account whose endpoints a caller sees: its key's account, or '' for the operator's master key."""
    return ctx.principal.account_id or ""


class CustomEndpoints:
    """The store, the sealer, the address policy, and the adapter of the `custom` provider."""

    def __init__(self, db: Database, config: CustomEndpointsConfig) -> None:
        self.store = CustomStore(db)
        secret = config.encryption_key
        self.sealer = Sealer(secret.get_secret_value()) if secret is not None else None
        self.allow_private = config.allow_private_addresses
        self._session: aiohttp.ClientSession | None = None
        self._adapters: dict[str, OpenAICompatible] = {}

    def claims(self, model: str, provider: str | None) -> bool:
        return provider == PROVIDER if provider is not None else model.endswith("@" + PROVIDER)

    async def resolve(self, ctx: Context, model: str, provider: str | None) -> Resolved:
        """The caller's endpoint as a one-target `Resolved`, its key set on the request's `CallInfo`."""
        name = model if provider is not None else model.rpartition("@")[0]
        public = f"{name}@{PROVIDER}"
        found = await self.store.endpoint(owner_of(ctx), name) if self.sealer is not None and name else None
        if found is None:
            raise NotFound(f"The custom endpoint `{public}` does not exist.", param="model", code="model_not_found")
        if found.sealed is None or found.key_id is None or self.sealer is None:
            raise NotFound(
                f"The custom endpoint `{public}`'s API key was deleted: store it again with POST /v0/custom_api_key.",
                param="model",
                code="custom_api_key_not_found",
            )
        try:
            secret = self.sealer.open(found.sealed, owner_of(ctx), found.key_id)
        except SealBroken:
            raise Unavailable(
                f"The custom endpoint `{public}`'s API key cannot be opened on this gateway.",
                code="custom_api_key_unreadable",
            ) from None
        ctx.principal.require_model(public)
        config = ModelConfig(
            name=public,
            pricing=Pricing(free=True),
            deployments=[DeploymentConfig(provider=PROVIDER, model=found.model_arg, id=_deployment_id(ctx, name))],
        )
        ctx.model = config
        ctx.info.caller_key = CallerKey(PROVIDER, secret)
        target = Target(config, config.deployments[0], ProviderConfig(name=PROVIDER, base_url=found.url))
        return Resolved(config, (target,))

    # ---- the `custom` provider's adapter -------------------------------------------------------------------

    async def chat(self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo) -> ChatCompletion:
        adapter = await self._adapter(target)
        return await adapter.chat(request, target, info)

    def chat_stream(
        self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo
    ) -> AsyncIterator[ChatCompletionChunk]:
        return self._stream(request, target, info)

    async def _stream(
        self, request: GatewayRequest[ChatRequest], target: Target, info: CallInfo
    ) -> AsyncIterator[ChatCompletionChunk]:
        adapter = await self._adapter(target)
        chunks = adapter.chat_stream(request, target, info)
        try:
            async for chunk in chunks:
                yield chunk
        finally:  # the caller leaving closes this generator: close the upstream's with it
            close = getattr(chunks, "aclose", None)
            if close is not None:
                await close()

    async def _adapter(self, target: Target) -> OpenAICompatible:
        """The URL's adapter, after checking where its host resolves now. This check names the endpoint in a
        clear 400; the session's resolver checks again on each connection, and that is what is connected to."""
        url = target.provider.base_url or ""
        try:
            _, host, port = split_url(url)
            await checked_addresses(host, port, self.allow_private)
        except AddressRefused as exc:
            why = exc.reason.removeprefix("its ")
            message = f"The custom endpoint `{target.model.name}` cannot be called: its URL's {why}."
            raise AddressNotAllowed(message, param="model") from None
        found = self._adapters.get(url)
        if found is None:
            if len(self._adapters) >= _MAX_ADAPTERS:
                self._adapters.clear()
            found = self._adapters[url] = OpenAICompatible(target.provider, self._http())
        return found

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(
                resolver=PinnedResolver(self.allow_private), use_dns_cache=False, limit=0, limit_per_host=64
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                json_serialize=lambda o: orjson.dumps(o).decode(),
                skip_auto_headers=("User-Agent",),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _deployment_id(ctx: Context, name: str) -> str:
    """The endpoint's name in logs and the router's per-deployment state; one per account and name."""
    return f"{PROVIDER}:{owner_of(ctx) or 'operator'}:{name}"
