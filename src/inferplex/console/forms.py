"""HTML forms to the admin API's bodies (admin/models.py), and back.

A form field carries text; the admin API's models are strict (an integer is an int, a list a list). Each
field is converted by its kind here, then the model validates the whole, so the console refuses exactly what
the API refuses, naming the same field. What the form cannot hold as a plain input (metadata, processors,
limit rules) is JSON in a textarea; lists of names (models, IPs, tags) are comma- or line-separated.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.datastructures import FormData

from inferplex.admin.models import invalid
from inferplex.errors import InvalidRequest

M = TypeVar("M", bound=BaseModel)

INTEGERS = ("rpm", "tpm", "max_concurrent", "monthly_cap_micros", "credits_micros")
NAMES = ("allowed_models", "allowed_ips", "tags")  # comma- or line-separated
JSON_LISTS = ("limit_rules", "user_limit_rules")
PROCESSORS = ("default_processors", "enforced_processors")  # names, or a JSON list of names and objects
MICROS = Decimal(1_000_000)


class FormError(InvalidRequest):
    """A field the console could not read, or the model refused: shown beside the form it came from."""


def _text(form: FormData, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def _integer(name: str, text: str) -> int | None:
    if not text:
        return None
    try:
        return int(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise FormError(f"`{name}` must be a whole number.", param=name) from None


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.replace("\n", ",").split(",") if part.strip()]


def _json(name: str, text: str, kind: type) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        raise FormError(f"`{name}` must be JSON ({kind.__name__}).", param=name) from None
    if not isinstance(value, kind):
        raise FormError(f"`{name}` must be a JSON {'object' if kind is dict else 'list'}.", param=name)
    return value


def _processors(name: str, text: str) -> list[Any]:
    return _json(name, text, list) if text.startswith("[") else _names(text)


def _expiry(text: str) -> float | None:
    """A `datetime-local` value (read as UTC), or UNIX seconds; empty: never."""
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise FormError("`expires_at` must be a date and time (UTC).", param="expires_at") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)).timestamp()


def fields(form: FormData, names: Iterable[str], *, present_only: bool) -> dict[str, Any]:
    """The model's fields from the form, converted by kind. `present_only`: only the fields the form has
    (an edit, where an absent field is left as it is); otherwise an empty field is left to the default."""
    out: dict[str, Any] = {}
    for name in names:
        if name == "scopes":
            if "scopes_shown" in form or "scopes" in form:  # a form whose boxes are all unchecked still says so
                out["scopes"] = [s for s in form.getlist("scopes") if isinstance(s, str)]
            continue
        if name not in form:
            continue
        text = _text(form, name)
        if name in INTEGERS:
            number = _integer(name, text)
            if number is not None or present_only:
                out[name] = number
        elif name in NAMES:
            out[name] = _names(text)
        elif name in JSON_LISTS:
            out[name] = _json(name, text, list) if text else []
        elif name in PROCESSORS:
            out[name] = _processors(name, text) if text else []
        elif name == "metadata":
            out[name] = _json(name, text, dict) if text else {}
        elif name == "expires_at":
            out[name] = _expiry(text)
        elif name == "account_id":
            if text:
                out[name] = text
        elif text or present_only:
            out[name] = text
    return out


def parse(model: type[M], values: dict[str, Any]) -> M:
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise FormError(invalid(exc).message, param=invalid(exc).param) from None


def dollars_to_micros(text: str, name: str = "amount") -> int:
    """ "12.50" (US dollars, at most six decimals) as micro-USD; refused (naming `name`) otherwise."""
    try:
        amount = Decimal(text.strip().replace(",", "").lstrip("$"))
    except InvalidOperation:
        raise FormError(f"`{name}` must be an amount in dollars, e.g. 12.50.", param=name) from None
    micros = amount * MICROS
    if not amount.is_finite() or micros != micros.to_integral_value():
        raise FormError(f"`{name}` must be an amount in dollars with at most six decimals.", param=name)
    return int(micros)


def shown(value: Any) -> str:
    """A stored value as its form field shows it (the inverse of `fields`)."""
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return ", ".join(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value) if value else ""
    return str(value)


def expiry_shown(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M")
