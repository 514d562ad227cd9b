"""The Inferada dialect's standalone routes: PII (`/v1/pii/analyse`, `/redact`, `/restore`), language
(`/v1/language/correct`, LanguageTool's `/v2/check` and `/v2/languages`) and `GET /v1/services`.

They run the gateway's own detectors (`inferada_pii.py`, `inferada_language.py`), not a model, so they take
no path through the pipeline and are not billed. Each route requires its token scope, Inferada's: `pii` for
the PII routes, `language` for the language ones (403 without); `/v1/services` needs only a valid key and
lists what that key's scopes reach.

Every error is Inferada's `{"error": "<message>", "request_id": "<id>"}` with the same id in `x-request-id`,
at Inferada's statuses: 400 an invalid body (not JSON, or not a form where one is accepted, a missing or
wrong field: what the gateway elsewhere answers 415 for is a 400 here, since Inferada has no 415), 401, 403,
404 (an unknown `service_id`, an unknown route under these prefixes), 413 a body over the size limit, 422 an
unsupported language. The chat route stays OpenAI's (`dialects/openai.py`), as Inferada's docs keep it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.canonical import parse
from inferplex.context import Context
from inferplex.dialects import inferada_language as language
from inferplex.dialects import inferada_pii as pii
from inferplex.dialects.failure import error_headers
from inferplex.dialects.inferada_responses import InferadaService
from inferplex.dialects.inferada_wire import (
    CheckRequest,
    CorrectRequest,
    PiiRestoreRequest,
    PiiTextRequest,
    read_body,
    read_data,
)
from inferplex.dialects.registry import Dialect
from inferplex.edge import Handler, endpoint, json_response
from inferplex.errors import GatewayError, InvalidRequest, NotFound
from inferplex.services import Services

# Inferada's service scopes, and the gateway scopes that reach each (a chat key reaches completions).
SERVICE_SCOPES = {
    "completions": ("completions", "chat"),
    "pii": ("pii",),
    "language": ("language",),
    "stt": ("stt", "audio"),
    "tts": ("tts", "audio"),
}


def _error(err: GatewayError, request_id: str) -> dict[str, Any]:
    return {"error": err.message, "request_id": request_id}


def render_error(err: GatewayError, ctx: Context) -> Response:
    status = 400 if err.status == 415 else err.status
    return json_response(_error(err, ctx.request_id), error_headers(err, ctx), status)


def error_body(err: GatewayError) -> dict[str, Any]:
    """An error made before any route ran (404, 405, a refused request head): a request id of its own."""
    return _error(err, Context().request_id)


# ---- services ---------------------------------------------------------------------------------------------


def _audio(services: Services, scope: str, kind: str) -> list[InferadaService]:
    """Each configured model of `kind` as a service of `scope`, by its name (the first the default); none
    configured: the scope listed once, inactive, so a client sees it and that it cannot use it."""
    found = [m.name for m in services.pipeline.catalog.models if m.type == kind]
    if not found:
        return [{"id": f"inferplex-{scope}", "scope": scope, "name": f"{kind.capitalize()} (no model configured)",
                 "active": False, "is_default": False}]  # fmt: skip
    return [
        {"id": name, "scope": scope, "name": f"{kind.capitalize()}: {name}", "active": True, "is_default": i == 0}
        for i, name in enumerate(found)
    ]


def offered(services: Services) -> list[InferadaService]:
    """What the gateway offers per Inferada scope: one built-in service each for chat, pii and language; each
    speech (tts) and transcription (stt) model as a service of its own (dialects/inferada_audio.py)."""
    chat = sum(1 for m in services.pipeline.catalog.models if m.type == "chat")
    return [
        {"id": "inferplex-completions", "scope": "completions", "name": "Chat completions (the configured models)",
         "active": chat > 0, "is_default": chat > 0},
        {"id": "inferplex-pii", "scope": "pii", "name": "PII detection and redaction (built-in detectors)",
         "active": True, "is_default": True},
        {"id": "inferplex-language", "scope": "language", "name": "Spelling correction (built-in dictionaries)",
         "active": True, "is_default": True},
        *_audio(services, "stt", "transcription"),
        *_audio(services, "tts", "speech"),
    ]  # fmt: skip


def check_service(services: Services, scope: str, service_id: str | None) -> None:
    """A `service_id` must name one of this scope's active services; omitted, the default serves."""
    if service_id is None:
        return
    if not any(s["id"] == service_id and s["scope"] == scope and s["active"] for s in offered(services)):
        raise NotFound(f"Service not found: {service_id!r} is not an active {scope} service.", code="service_not_found")


async def list_services(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    ctx.client_ip = request.client.host if request.client else None
    principal = ctx.principal = await services.auth.authenticate(request)  # any key: no scope of its own
    wanted = request.query_params.get("scope")
    if wanted is not None and wanted not in SERVICE_SCOPES:
        raise InvalidRequest(
            f"Invalid value for 'scope': {wanted!r} (one of {', '.join(SERVICE_SCOPES)}).", param="scope"
        )
    reached = principal.scopes
    visible = [
        s
        for s in offered(services)
        if (wanted is None or s["scope"] == wanted)
        and ("admin" in reached or not reached.isdisjoint(SERVICE_SCOPES[s["scope"]]))
    ]
    return json_response({"services": visible}, ctx.headers())


# ---- PII --------------------------------------------------------------------------------------------------


def _pii_text(run: Callable[[str, str | None, float], Mapping[str, object]]) -> Handler:
    """A PII route over a text (analyse, redact): the detectors run off the event loop (they are CPU-bound)."""

    async def handler(request: Request, ctx: Context) -> Response:
        services: Services = request.app.state.services
        body = await read_body(request, services, PiiTextRequest)
        check_service(services, "pii", body.service_id)
        answer = await asyncio.to_thread(run, body.text, body.language, body.score_threshold)
        return json_response(answer, ctx.headers())

    return handler


pii_analyse, pii_redact = _pii_text(pii.analyse), _pii_text(pii.redact)


async def pii_restore(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    body = await read_body(request, services, PiiRestoreRequest)
    check_service(services, "pii", body.service_id)
    return json_response(pii.restore(body.text, body.mapping), ctx.headers())


# ---- language ---------------------------------------------------------------------------------------------


async def language_correct(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    body = await read_body(request, services, CorrectRequest)
    check_service(services, "language", body.service_id)
    checked = await asyncio.to_thread(language.check, body.text, body.language)
    return json_response(language.correction(body, checked), ctx.headers())


async def _authenticate(request: Request, ctx: Context, services: Services, scope: str) -> None:
    ctx.client_ip = request.client.host if request.client else None
    ctx.principal = await services.auth.authenticate(request)
    ctx.principal.require_scope(scope)


def _with_key(request: Request, key: Any) -> Request:
    """`request` as if its form's `apiKey` came as `Authorization: Bearer`, for the authenticator."""
    if not isinstance(key, str) or not key:
        return request
    headers = [*request.scope["headers"], (b"authorization", b"Bearer " + key.encode())]
    return Request({**request.scope, "headers": headers})


async def lt_check(request: Request, ctx: Context) -> Response:
    """LanguageTool Premium's clients send their key as the form's `apiKey`: taken when no header carries
    one, so those clients work with only the server URL changed. A header is checked before the body is read."""
    services: Services = request.app.state.services
    in_header = "authorization" in request.headers or "x-api-key" in request.headers
    if in_header:
        await _authenticate(request, ctx, services, "language")
    data = await read_data(request, services, form=True)
    if not in_header:
        key = data.get("apiKey") if isinstance(data, dict) else None
        await _authenticate(_with_key(request, key), ctx, services, "language")
    body: CheckRequest = parse(CheckRequest, data)
    check_service(services, "language", body.service_id)
    doc = language.document(body)
    checked = await asyncio.to_thread(language.check, doc.plain, body.language)
    return json_response(language.lt_check(body, doc, checked), ctx.headers())


async def lt_languages(request: Request, ctx: Context) -> Response:
    return json_response(language.languages(), ctx.headers())


def _route(path: str, handler: Any, scope: str | None, method: str = "POST") -> Route:
    return Route(path, endpoint(render_error, handler, scope, "inferada"), methods=[method])


routes = [
    _route("/v1/pii/analyse", pii_analyse, "pii"),
    _route("/v1/pii/redact", pii_redact, "pii"),
    _route("/v1/pii/restore", pii_restore, "pii"),
    _route("/v1/language/correct", language_correct, "language"),
    _route("/v2/check", lt_check, None),  # authenticated by the handler: the key may be in the form
    _route("/v2/languages", lt_languages, "language", "GET"),
    _route("/v1/services", list_services, None, "GET"),  # authenticated by the handler: no scope of its own
]

DIALECT = Dialect("inferada", routes, render_error, error_body, ("/v1/pii/", "/v1/language/", "/v2/", "/v1/services"))
