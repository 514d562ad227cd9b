"""Inferada's audio routes: `POST /v1/audio/transcriptions`, `/v1/audio/translations` (scope `stt`),
`POST /v1/audio/speech` and `GET /v1/audio/voices` (scope `tts`).

Their paths are OpenAI's, so these ARE OpenAI's audio routes (`dialects/openai.py` lists this module's
`routes` in place of `openai_audio.routes`): every request runs OpenAI's parsing, the speech and
transcription families and OpenAI's renderings (`openai_audio`), with Inferada's rules layered on for an
Inferada client. A caller is Inferada's when its request says so or its key does:
- the request carries `service_id` (a query parameter, a JSON field, a form field) or, on speech, the
  `inferada` extension object;
- or its key (or token) holds Inferada's `stt` / `tts` but not the gateway's broader `audio` scope.

Scopes: a route takes either the gateway's `audio` scope (as before) or Inferada's narrower one (`tts` for
speech and voices, `stt` for transcriptions and translations), as a `chat` key reaches Inferada's
`completions` services. A key with neither is a 403.

Inferada's rules, for its clients only (OpenAI's callers keep OpenAI's behaviour):
- `service_id` names an active service of the route's scope (`GET /v1/services`: each configured speech
  model is a `tts` service, each transcription model an `stt` one, by the model's name) and selects that
  model; an unknown one is a 404, one that contradicts `model` a 400. Without either, the scope's default
  service (the first such model the key may use) serves: Inferada's forms have no required `model`.
- a transcription `prompt` longer than 896 characters is a 422;
- speech: an unknown voice is a 400 listing the model's voices (message and `available_voices`);
- `response_format=json` answers `{"text", "duration"}` (seconds; the provider's figure, else the gateway's
  measure of the upload);
- every error is Inferada's `{"error", "request_id"}` (a limit refusal its `limit_exceeded` body, whose
  `scope` is `stt` or `tts`), with a 415 answered as 400 as on Inferada's other routes.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message

from inferplex.accounts.limits import LimitExceeded
from inferplex.auth import Principal
from inferplex.config import ModelConfig
from inferplex.context import Context
from inferplex.dialects import openai_audio
from inferplex.dialects.failure import error_headers
from inferplex.dialects.inferada import check_service
from inferplex.edge import endpoint, json_response, read_json
from inferplex.errors import GatewayError, InvalidRequest, PermissionDenied, SpendingCapReached
from inferplex.families.base import Family
from inferplex.families.speech import SpeechAdapter
from inferplex.families.transcription import (
    TRANSCRIPTION,
    TRANSLATION,
    Transcript,
    TranscriptionRequest,
    TranslationRequest,
)
from inferplex.gateway_request import parse_request
from inferplex.media_store.uploads import UploadForm, read_upload_form
from inferplex.services import Services

MAX_PROMPT = 896  # Inferada's limit on a transcription prompt, in characters
SPEECH_SCOPES = ("tts", "audio")
HEARING_SCOPES = ("stt", "audio")
_INFERADA_SCOPES = frozenset({"stt", "tts"})
_MODEL_TYPE = {"tts": "speech", "stt": "transcription"}
_SCOPE_OF = {"speech": "tts", "transcription": "stt", "translation": "stt"}  # a family's Inferada scope
# The audio form's fields (OpenAI's, the gateway's) and Inferada's `service_id`.
FORM_KINDS = {**openai_audio._KINDS, "service_id": "str"}


class UnknownVoice(InvalidRequest):
    code = "unknown_voice"

    def __init__(self, message: str, voices: list[str]) -> None:
        super().__init__(message, param="voice")
        self.voices = voices


# ---- who is calling ----------------------------------------------------------------------------------------


def inferada_key(principal: Principal) -> bool:
    """A key made Inferada's way: its audio scopes are Inferada's (`stt`, `tts`), not the gateway's `audio`."""
    scopes = principal.scopes
    return not scopes.isdisjoint(_INFERADA_SCOPES) and "audio" not in scopes and "admin" not in scopes


def require_any(principal: Principal, scopes: tuple[str, ...]) -> None:
    """A 403 naming the first (Inferada's) scope unless the key holds one of `scopes` (or `admin`)."""
    if principal.scopes.isdisjoint(scopes) and "admin" not in principal.scopes:
        raise PermissionDenied(
            f"This key does not have the '{scopes[0]}' scope (or '{scopes[-1]}').", code="scope_not_allowed"
        )


async def authenticate(request: Request, ctx: Context, scopes: tuple[str, ...]) -> None:
    """Authenticate (401 in OpenAI's shape: nothing says yet who the caller is), then tell an Inferada
    client by its key or its query's `service_id`, then require one of `scopes` (a 403 in its shape)."""
    services: Services = request.app.state.services
    ctx.client_ip = request.client.host if request.client else None
    ctx.principal = await services.auth.authenticate(request)
    if inferada_key(ctx.principal) or "service_id" in request.query_params:
        ctx.dialect = "inferada"
    require_any(ctx.principal, scopes)


def render_error(err: GatewayError, ctx: Context) -> Response:
    """Inferada's error body for its clients, OpenAI's error object for everyone else."""
    if ctx.dialect != "inferada":
        return json_response(err.to_openai(), error_headers(err, ctx), err.status)
    body: dict[str, Any] = {"error": err.message, "request_id": ctx.request_id}
    if isinstance(err, LimitExceeded):
        body = dict(err.detail)
        body["scope"] = _SCOPE_OF.get(body["scope"], body["scope"])
    elif isinstance(err, SpendingCapReached):
        body = {"error": err.message, "request_id": err.request_id}
    elif isinstance(err, UnknownVoice):
        body["available_voices"] = err.voices
    status = 400 if err.status == 415 else err.status
    return json_response(body, error_headers(err, ctx), status)


# ---- services, models and voices ---------------------------------------------------------------------------


def default_model(services: Services, principal: Principal, scope: str) -> str:
    """The scope's default service: the first configured model of its type the key may use."""
    kind = _MODEL_TYPE[scope]
    for m in services.pipeline.catalog.models:
        if m.type == kind and principal.may_use(m.name):
            return m.name
    raise InvalidRequest(f"No {scope} service is configured on this gateway.", param="service_id")


def chosen_model(services: Services, ctx: Context, scope: str, fields: dict[str, Any]) -> None:
    """`service_id` (taken out of `fields`) as the model, checked against `model`; else the default."""
    service_id = fields.pop("service_id", None)
    if service_id is not None:
        if not isinstance(service_id, str):
            raise InvalidRequest("Invalid value for 'service_id': expected a string.", param="service_id")
        check_service(services, scope, service_id)
        if fields.get("model") not in (None, service_id):
            raise InvalidRequest(
                f"'model' ({fields['model']!r}) and 'service_id' ({service_id!r}) name different models; "
                "send one of them.",
                param="service_id",
            )
        fields["model"] = service_id
    elif fields.get("model") is None:
        fields["model"] = default_model(services, ctx.principal, scope)


def voices_of(services: Services, model: ModelConfig) -> list[str]:
    """Every voice the model's deployments take, in order, once each."""
    seen: dict[str, None] = {}
    for target in services.pipeline.catalog.targets(model):
        adapter = services.pipeline.adapters.get(target.provider.name)
        if isinstance(adapter, SpeechAdapter):
            seen.update(dict.fromkeys(adapter.voices(target)))
    return list(seen)


def find_model(services: Services, name: Any, kind: str) -> ModelConfig | None:
    return next((m for m in services.pipeline.catalog.models if m.name == name and m.type == kind), None)


def check_voice(services: Services, fields: dict[str, Any]) -> None:
    """Inferada's 400 for a voice the model does not have, listing the ones it does."""
    voice, model = fields.get("voice"), find_model(services, fields.get("model"), "speech")
    if not isinstance(voice, str) or model is None:
        return  # a missing or custom voice, or an unknown model: the canonical request's errors say so
    voices = voices_of(services, model)
    if voices and voice not in voices:
        raise UnknownVoice(f"Unknown voice '{voice}' for {model.name}. Available voices: {', '.join(voices)}.", voices)


# ---- speech ------------------------------------------------------------------------------------------------


async def speech(request: Request, ctx: Context) -> Response:
    services: Services = request.app.state.services
    await authenticate(request, ctx, SPEECH_SCOPES)
    data = await read_json(request, services.max_body_bytes, services.json_limits)
    if isinstance(data, dict) and ("service_id" in data or "inferada" in data):
        ctx.dialect = "inferada"
    if ctx.dialect == "inferada" and isinstance(data, dict):
        data.pop("inferada", None)  # no processor applies to speech
        chosen_model(services, ctx, "tts", data)
        check_voice(services, data)
    return await openai_audio.speech(replayed(request, data), ctx)


def replayed(request: Request, data: Any) -> Request:
    """`request` with `data` as its JSON body, for OpenAI's handler to read again; every later `receive`
    (a streamed answer listening for the caller leaving) is the caller's own."""
    body = orjson.dumps(data)
    first = True

    async def receive() -> Message:
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await request.receive()

    headers = [(k, v) for k, v in request.scope["headers"] if k != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    return Request({**request.scope, "headers": headers}, receive)


async def voices(request: Request, ctx: Context) -> Response:
    """OpenAI's voices route; an Inferada client's `service_id` narrows it to that service's model."""
    await authenticate(request, ctx, SPEECH_SCOPES)
    service_id = request.query_params.get("service_id")
    if service_id is not None:
        check_service(request.app.state.services, "tts", service_id)
        query = [(k, v) for k, v in request.query_params.multi_items() if k not in ("service_id", "model")]
        query.append(("model", service_id))
        scope = {**request.scope, "query_string": urlencode(query).encode()}
        request = Request(scope, request.receive)
    return await openai_audio.voices(request, ctx)


# ---- transcription and translation -------------------------------------------------------------------------


async def transcriptions(request: Request, ctx: Context) -> Response:
    return await _hear(request, ctx, TRANSCRIPTION, TranscriptionRequest)


async def translations(request: Request, ctx: Context) -> Response:
    return await _hear(request, ctx, TRANSLATION, TranslationRequest)


async def read_form(request: Request, services: Services) -> UploadForm:
    """OpenAI's audio form (its file on disk, size-limited, type-checked), `service_id` accepted too."""
    limit = openai_audio.upload_limit(services)
    return await read_upload_form(request, max_bytes=limit, files=openai_audio._FILES, kinds=FORM_KINDS)


def hearing_rules(services: Services, ctx: Context, fields: dict[str, Any]) -> None:
    prompt = fields.get("prompt")
    if isinstance(prompt, str) and len(prompt) > MAX_PROMPT:
        raise InvalidRequest(
            f"'prompt' is {len(prompt)} characters long; at most {MAX_PROMPT} are allowed.",
            param="prompt",
            status=422,
            code="prompt_too_long",
        )
    chosen_model(services, ctx, "stt", fields)


async def _hear(
    request: Request,
    ctx: Context,
    family: Family[Any, Any, Transcript],
    model: type[TranscriptionRequest | TranslationRequest],
) -> Response:
    services: Services = request.app.state.services
    await authenticate(request, ctx, HEARING_SCOPES)
    form = await read_form(request, services)
    with form:
        if "service_id" in form.fields:
            ctx.dialect = "inferada"
        fields = await openai_audio.audio_fields(form)
        if ctx.dialect == "inferada":
            if "service_id" in request.query_params:
                fields.setdefault("service_id", request.query_params["service_id"])
            hearing_rules(services, ctx, fields)
        parsed = parse_request(model, fields)
        result = await services.pipeline.run(family, ctx, parsed)
    if ctx.dialect == "inferada" and parsed.body.response_format == "json" and not getattr(parsed.body, "stream", None):
        return json_response(inferada_transcript(result, parsed.body), ctx.headers())
    return openai_audio.TRANSCRIPT_RENDERING.result(result, parsed, ctx)


def inferada_transcript(result: Transcript, body: TranscriptionRequest | TranslationRequest) -> dict[str, Any]:
    """Inferada's `{"text", "duration"}`: the provider's duration, else the gateway's measure of the file."""
    duration = result.duration
    if duration is None and body.file.duration_ms is not None:
        duration = body.file.duration_ms / 1000
    out: dict[str, Any] = {"text": result.text, "duration": duration}
    if result.language:
        out["language"] = result.language
    return out


def _route(path: str, handler: Any, method: str = "POST") -> Route:
    return Route(path, endpoint(render_error, handler, None), methods=[method])  # authenticated by the handler


routes = [
    _route("/v1/audio/speech", speech),
    _route("/v1/audio/voices", voices, "GET"),
    _route("/v1/audio/transcriptions", transcriptions),
    _route("/v1/audio/translations", translations),
]
