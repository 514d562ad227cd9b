"""Unify's custom keys and custom endpoints: `/v0/custom_api_key` and `/v0/custom_endpoint` (and their list,
rename and delete), as Unify's own service and the unifyai SDK call them: every argument a query parameter,
`{"info": "..."}` on success, FastAPI's `{"detail"}` (or its 422 list for a missing parameter) on failure.

Each route acts on the caller's account only (custom_endpoints/store.py takes the account in every
query). A key's value is sealed before it is stored and is never shown again: reads show `****` and, for a
key of 16 characters or more, its last four (Unify shows the last four of any key, which for a short key is
all of it). A URL is refused (400 naming `url`) when its host is, or resolves to, an address the gateway must
not reach (custom_endpoints/addresses.py), unless the operator allows private addresses.
"""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from typing_extensions import TypedDict

from inferplex.context import Context
from inferplex.custom_endpoints.addresses import AddressRefused, check_url
from inferplex.custom_endpoints.sealing import SealBroken, Sealer
from inferplex.custom_endpoints.service import PROVIDER, CustomEndpoints, owner_of
from inferplex.custom_endpoints.store import MAX_PER_ACCOUNT
from inferplex.dialects.unify_wire import Params, render_unify_error
from inferplex.edge import endpoint, json_response
from inferplex.errors import InvalidRequest, NotFound, PermissionDenied


class Info(TypedDict):
    """Every successful change: `{"info": "..."}`, as Unify's service answers."""

    info: str


class CustomKey(TypedDict):
    name: str
    value: str  # `****` and, for a key of 16 characters or more, its last four


class CustomEndpointItem(TypedDict):
    name: str  # `name@custom`
    url: str
    key: str | None  # the key's name; null once the key is deleted
    model_arg: str


_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_MAX_VALUE = 4096
_MAX_URL = 2048


def _service(request: Request) -> tuple[CustomEndpoints, Sealer]:
    custom: CustomEndpoints = request.app.state.custom_endpoints
    if custom.sealer is None:
        raise PermissionDenied(
            "Custom API keys and endpoints are not enabled on this gateway: its operator sets "
            "custom_endpoints.encryption_key."
        )
    return custom, custom.sealer


def _info(ctx: Context, message: str) -> Response:
    return json_response({"info": message}, ctx.headers())


def _key_name(params: Params, name: str) -> str | None:
    value = params.string(name, required=True)
    if value is not None and not _NAME.fullmatch(value):
        params.problems.append(
            {
                "loc": ["query", name],
                "msg": "1 to 100 letters, digits, '_', '.' or '-'",
                "type": "string_pattern_mismatch",
            }
        )
    return value


def _masked(sealer: Sealer, owner: str, key_id: str, sealed: str) -> str:
    try:
        value = sealer.open(sealed, owner, key_id)
    except SealBroken:
        return "****"
    return "****" + value[-4:] if len(value) >= 16 else "****"


# ---- custom API keys ------------------------------------------------------------------------------------------


async def create_key(request: Request, ctx: Context) -> Response:
    custom, sealer = _service(request)
    params = Params(request.query_params)
    name, value = _key_name(params, "name"), params.string("value", required=True)
    params.done()
    assert name is not None and value is not None
    if not value.strip() or len(value) > _MAX_VALUE:
        raise InvalidRequest(f"value: the key must be 1 to {_MAX_VALUE} characters.", param="value")
    owner, key_id = owner_of(ctx), custom.store.new_key_id()
    added = await custom.store.add_key(owner, key_id, name, sealer.seal(value, owner, key_id))
    _added(added, f"A custom API key named `{name}`")
    return _info(ctx, "API key created successfully!")


async def get_key(request: Request, ctx: Context) -> Response:
    custom, sealer = _service(request)
    params = Params(request.query_params)
    name = params.string("name", required=True)
    params.done()
    assert name is not None
    found = await custom.store.key(owner_of(ctx), name)
    if found is None:
        raise NotFound("Custom API Key not found.")
    return json_response(
        {"name": found.name, "value": _masked(sealer, owner_of(ctx), found.id, found.sealed)}, ctx.headers()
    )


async def list_keys(request: Request, ctx: Context) -> Response:
    custom, sealer = _service(request)
    Params(request.query_params).done()
    owner = owner_of(ctx)
    keys = await custom.store.keys(owner)
    return json_response(
        [{"name": k.name, "value": _masked(sealer, owner, k.id, k.sealed)} for k in keys], ctx.headers()
    )


async def rename_key(request: Request, ctx: Context) -> Response:
    custom, _ = _service(request)
    params = Params(request.query_params)
    name, new_name = params.string("name", required=True), _key_name(params, "new_name")
    params.done()
    assert name is not None and new_name is not None
    _renamed(await custom.store.rename_key(owner_of(ctx), name, new_name), "Custom API Key", new_name)
    return _info(ctx, "API key renamed successfully!")


async def delete_key(request: Request, ctx: Context) -> Response:
    custom, _ = _service(request)
    params = Params(request.query_params)
    name = params.string("name", required=True)
    params.done()
    assert name is not None
    if not await custom.store.delete_key(owner_of(ctx), name):
        raise NotFound("Custom API Key not found.")
    return _info(ctx, "API key deleted successfully!")


def _added(outcome: str, what: str) -> None:
    if outcome == "taken":
        raise InvalidRequest(f"{what} already exists.", param="name")
    if outcome == "full":
        raise InvalidRequest(f"name: an account holds at most {MAX_PER_ACCOUNT} of these.", param="name")


def _renamed(outcome: str, what: str, new_name: str) -> None:
    if outcome == "missing":
        raise NotFound(f"{what} not found.")
    if outcome == "taken":
        raise InvalidRequest(f"{what} `{new_name}` already exists.", param="new_name")


# ---- custom endpoints -----------------------------------------------------------------------------------------


def _endpoint_name(value: str, provider: str | None, param: str) -> str:
    """`name@custom` (or a bare name with `provider=custom`, as older SDKs send it) into the bare name."""
    name, at, suffix = value.rpartition("@")
    if not at:
        name, suffix = value, provider or ""
    if suffix != PROVIDER:
        raise InvalidRequest(
            f"{param}: a custom endpoint is named `name@custom` here (got {value!r}); "
            "endpoints on other providers cannot be registered on this gateway.",
            param=param,
        )
    if not _NAME.fullmatch(name):
        raise InvalidRequest(
            f"{param}: the name before @custom must be 1 to 100 letters, digits, '_', '.' or '-'.", param=param
        )
    return name


async def create_endpoint(request: Request, ctx: Context) -> Response:
    custom, _ = _service(request)
    params = Params(request.query_params)
    raw_name, url = params.string("name", required=True), params.string("url", required=True)
    key_name = params.string("key_name", required=True)
    model_arg = params.string("model_arg") or params.string("model_name")  # model_name: unifyai before 0.9
    provider = params.string("provider")
    params.done()
    assert raw_name is not None and url is not None and key_name is not None
    name = _endpoint_name(raw_name, provider, "name")
    if len(url) > _MAX_URL:
        raise InvalidRequest(f"url: at most {_MAX_URL} characters.", param="url")
    try:
        await check_url(url, custom.allow_private)
    except AddressRefused as exc:
        raise InvalidRequest(f"url: {exc.reason}.", param="url", code="url_not_allowed") from None
    key = await custom.store.key(owner_of(ctx), key_name)
    if key is None:
        raise NotFound("Custom API Key not found.")
    model = model_arg if model_arg and len(model_arg) <= 200 else name
    added = await custom.store.add_endpoint(owner_of(ctx), name, url.rstrip("/"), key.id, model)
    _added(added, f"The custom endpoint `{name}@{PROVIDER}`")
    return _info(ctx, "Custom endpoint created successfully!")


async def list_endpoints(request: Request, ctx: Context) -> Response:
    custom, _ = _service(request)
    Params(request.query_params).done()
    found = await custom.store.endpoints(owner_of(ctx))
    rows: list[dict[str, Any]] = [
        {"name": f"{e.name}@{PROVIDER}", "url": e.url, "key": e.key_name, "model_arg": e.model_arg} for e in found
    ]
    return json_response(rows, ctx.headers())


async def rename_endpoint(request: Request, ctx: Context) -> Response:
    custom, _ = _service(request)
    params = Params(request.query_params)
    name, new_name = params.string("name", required=True), params.string("new_name", required=True)
    params.done()
    assert name is not None and new_name is not None
    old, new = _endpoint_name(name, PROVIDER, "name"), _endpoint_name(new_name, PROVIDER, "new_name")
    _renamed(await custom.store.rename_endpoint(owner_of(ctx), old, new), "Custom endpoint", f"{new}@{PROVIDER}")
    return _info(ctx, "Custom endpoint renamed successfully!")


async def delete_endpoint(request: Request, ctx: Context) -> Response:
    custom, _ = _service(request)
    params = Params(request.query_params)
    name = params.string("name", required=True)
    params.done()
    assert name is not None
    if not await custom.store.delete_endpoint(owner_of(ctx), _endpoint_name(name, PROVIDER, "name")):
        raise NotFound("Custom endpoint not found.")
    return _info(ctx, "Custom endpoint deleted successfully!")


def _route(path: str, handler: Any, method: str) -> Route:
    return Route(path, endpoint(render_unify_error, handler, "chat", "unify"), methods=[method])


# The account's own configuration, used by its chat calls: the `chat` scope, as the query log's routes.
routes = [
    _route("/v0/custom_api_key", create_key, "POST"),
    _route("/v0/custom_api_key", get_key, "GET"),
    _route("/v0/custom_api_key", delete_key, "DELETE"),
    _route("/v0/custom_api_key/list", list_keys, "GET"),
    _route("/v0/custom_api_key/rename", rename_key, "POST"),
    _route("/v0/custom_endpoint", create_endpoint, "POST"),
    _route("/v0/custom_endpoint", delete_endpoint, "DELETE"),
    _route("/v0/custom_endpoint/list", list_endpoints, "GET"),
    _route("/v0/custom_endpoint/rename", rename_endpoint, "POST"),
]
