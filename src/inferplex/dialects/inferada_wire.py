"""The request bodies of Inferada's standalone routes, and reading them.

The models are what the routes validate with and what `/openapi.json` publishes. Unknown fields are
ignored, not refused: LanguageTool's clients send parameters this gateway has no use for (`username`,
`apiKey`, `dicts`, ...), and Inferada's clients may send fields added after this was written. A field of the
wrong type or out of range is a 400 naming it (`canonical.parse`), as Inferada answers an invalid body.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request

from inferplex.canonical import parse
from inferplex.dialects.forms import read_form
from inferplex.edge import read_json
from inferplex.errors import InvalidRequest
from inferplex.services import Services

M = TypeVar("M", bound=BaseModel)
FORM_MEDIA = ("application/x-www-form-urlencoded", "multipart/form-data")


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class PiiTextRequest(_Body):
    """`POST /v1/pii/analyse` and `/v1/pii/redact`."""

    text: str = Field(description="the text to analyse")
    language: str | None = Field(
        None, description="a language code (default `nl`, as Inferada's); its region sets how phone numbers "
        "written without `+` are read"
    )  # fmt: skip
    score_threshold: float = Field(0.7, ge=0, le=1, description="the lowest confidence reported")
    service_id: str | None = Field(None, description="a `pii` service from GET /v1/services")


class PiiRestoreRequest(_Body):
    """`POST /v1/pii/restore`: the text to restore and the mapping `/v1/pii/redact` answered."""

    text: str
    mapping: dict[str, str] = Field(description="placeholder -> original, as /v1/pii/redact returned it")
    service_id: str | None = Field(None, description="a `pii` service from GET /v1/services")


class _LanguageFields(_Body):
    language: str = Field("auto", description="a language code (`en`, `en-US`, `nl`) or `auto`")
    picky: bool = Field(False, description="accepted; the gateway's checker has one level")
    service_id: str | None = Field(None, description="a `language` service from GET /v1/services")


class CorrectRequest(_LanguageFields):
    """`POST /v1/language/correct`."""

    text: str


class CheckRequest(_LanguageFields):
    """`POST /v2/check`: LanguageTool's parameters, as a form (its clients) or JSON (Inferada's)."""

    text: str | None = Field(None, description="the text to check; this or `data`")
    data: str | None = Field(
        None, description='LanguageTool\'s annotated text, JSON: {"annotation": [{"text": ...}, {"markup": ..., '
        '"interpretAs": ...}]}; offsets then count the markup too'
    )  # fmt: skip
    enabledRules: str | None = Field(None, description="comma-separated rule ids")
    disabledRules: str | None = Field(None, description="comma-separated rule ids")
    enabledCategories: str | None = Field(None, description="comma-separated category ids")
    disabledCategories: str | None = Field(None, description="comma-separated category ids")
    enabledOnly: bool = Field(False, description="only the enabled rules and categories run")
    level: Literal["default", "picky"] | None = None
    motherTongue: str | None = None
    preferredVariants: str | None = None
    username: str | None = Field(None, description="LanguageTool Premium's account name: ignored")
    apiKey: str | None = Field(None, description="the gateway key, where no Authorization header is sent")


async def read_body(request: Request, services: Services, model: type[M], *, form: bool = False) -> M:
    """The body as `model`: JSON, or (where `form`) a form, within the gateway's size and shape limits."""
    validated: M = parse(model, await read_data(request, services, form=form))
    return validated


async def read_data(request: Request, services: Services, *, form: bool = False) -> Any:
    """The decoded body, not yet validated: JSON, or (where `form`) a form's fields as strings."""
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if form and media in FORM_MEDIA:
        try:
            data = await read_form(request, services.max_body_bytes, {}, services.json_limits)
        except InvalidRequest as err:
            err.status = 400  # a file field: Inferada's "invalid body", not OneInfer's 422
            raise
    elif media == "application/json":
        data = await read_json(request, services.max_body_bytes, services.json_limits)
    else:
        accepted = "application/json or a form (application/x-www-form-urlencoded)" if form else "application/json"
        raise InvalidRequest(f"Unsupported content type {media or '(none)'!r}: send the body as {accepted}.")
    return data
