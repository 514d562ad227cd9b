"""Unify's platform routes on the wire: how their query parameters and bodies are read, and how they fail.

Unify's API is a FastAPI service, so a bad parameter on its `/v0` routes (all but the chat route, whose
client is the OpenAI SDK) is FastAPI's 422: `{"detail": [{"loc": [...], "msg": "...", "type": "..."}]}`,
every problem listed at once, `loc` naming where (`query` or `body`) and which field; the `type`s are
pydantic's names. Any other failure is FastAPI's `{"detail": "message"}` at its own status. `Params`
collects the problems while a handler reads its parameters and raises them together (`done`), so a caller
fixing one does not discover the next only on the following call.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.datastructures import QueryParams
from starlette.responses import Response

from inferplex.context import Context
from inferplex.dialects.failure import error_headers
from inferplex.edge import json_response
from inferplex.errors import GatewayError

FAILURES = {"true": "include", "false": "exclude", "only": "only", "1": "include", "0": "exclude"}


class UnifyValidation(GatewayError):
    """FastAPI's 422: every problem found in the request, each with where it was."""

    status = 422
    type = "invalid_request_error"
    code = "validation_error"

    def __init__(self, detail: list[dict[str, Any]]) -> None:
        super().__init__("; ".join(f"{'.'.join(map(str, d['loc']))}: {d['msg']}" for d in detail))
        self.detail = detail


def render_unify_error(err: GatewayError, ctx: Context) -> Response:
    detail: Any = err.detail if isinstance(err, UnifyValidation) else err.message
    return json_response({"detail": detail}, error_headers(err, ctx), err.status)


def problem(where: str, name: str, msg: str, kind: str) -> dict[str, Any]:
    return {"loc": [where, name], "msg": msg, "type": kind}


def parse_time(value: str) -> float | None:
    """UNIX seconds from Unify's `YYYY-MM-DD hh:mm:ss` (or any ISO 8601 date-time, as Python's `str` of a
    datetime sends it), read as UTC when it names no zone; None if it is not one."""
    try:
        when = dt.datetime.fromisoformat(value.strip())
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return when.timestamp()
    except (ValueError, OverflowError):  # not a date-time, or one whose zone moves it outside years 1-9999
        return None


EARLIEST = dt.datetime.min.replace(tzinfo=dt.UTC).timestamp()
LATEST = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC).timestamp()


def iso(seconds: float) -> str:
    """ISO 8601 in UTC; a time past what a datetime holds (an interval's end after year 9999) is clamped."""
    return dt.datetime.fromtimestamp(min(max(seconds, EARLIEST), LATEST), dt.UTC).isoformat()


class Params:
    """A route's query parameters, read one by one; every problem is kept for `done`."""

    def __init__(self, query: QueryParams) -> None:
        self.query = query
        self.problems: list[dict[str, Any]] = []

    def _bad(self, name: str, msg: str, kind: str) -> None:
        self.problems.append(problem("query", name, msg, kind))

    def string(self, name: str, *, required: bool = False) -> str | None:
        value = self.query.get(name)
        if value is None:
            if required:
                self._bad(name, "Field required", "missing")
            return None
        if "\x00" in value:
            self._bad(name, "String should not contain a NUL character", "string_pattern_mismatch")
            return None
        return value

    def strings(self, name: str) -> list[str]:
        """A list as Unify's client sends one: the parameter repeated, or comma-separated, or both."""
        out: list[str] = []
        for value in self.query.getlist(name):
            if "\x00" in value:
                self._bad(name, "String should not contain a NUL character", "string_pattern_mismatch")
                return []
            out += [part.strip() for part in value.split(",") if part.strip()]
        return out

    def time(self, name: str) -> float | None:
        value = self.string(name)
        if value is None:
            return None
        seconds = parse_time(value)
        if seconds is None or not math.isfinite(seconds):
            self._bad(name, "Input should be a valid datetime (YYYY-MM-DD hh:mm:ss)", "datetime_parsing")
        return seconds

    def integer(self, name: str, default: int, lowest: int, highest: int) -> int:
        value = self.string(name)
        if value is None:
            return default
        try:
            number = int(value.strip())
        except ValueError:
            self._bad(name, "Input should be a valid integer, unable to parse string as an integer", "int_parsing")
            return default
        if number < lowest:
            self._bad(name, f"Input should be greater than or equal to {lowest}", "greater_than_equal")
        elif number > highest:
            self._bad(name, f"Input should be less than or equal to {highest}", "less_than_equal")
        return number

    def failures(self) -> str:
        """`failures`: false (the default: successes only), true (both), or `only`."""
        value = self.string("failures")
        if value is None:
            return "exclude"
        found = FAILURES.get(value.strip().lower())
        if found is None:
            self._bad("failures", "Input should be a valid boolean or 'only'", "bool_parsing")
            return "exclude"
        return found

    def done(self) -> None:
        if self.problems:
            raise UnifyValidation(self.problems)


class LogQuery(BaseModel):
    """`POST /v0/queries`: a query made elsewhere (a local model, another service), logged with the caller's
    own. `consume_credits` (sent by unifyai 0.9) is accepted and ignored: a logged query never costs."""

    model_config = ConfigDict(extra="ignore")

    endpoint: str
    query_body: dict[str, Any]
    response_body: dict[str, Any] | None = None
    tags: list[str] | str | None = None
    timestamp: str | None = None
    consume_credits: bool | None = None


def log_query(raw: Any) -> tuple[LogQuery, str, str, float | None]:
    """The body checked, with its endpoint split into (model, provider) and its timestamp in UNIX seconds;
    a 422 listing every problem otherwise."""
    try:
        body = LogQuery.model_validate(raw)
    except ValidationError as exc:
        detail = [{"loc": ["body", *e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()]
        raise UnifyValidation(detail) from None
    problems = []
    model, at, provider = body.endpoint.rpartition("@")
    if not (at and model and provider) or len(model) > 200 or len(provider) > 200 or "\x00" in body.endpoint:
        msg = "Endpoint should be `model@provider`, each part 1 to 200 characters"
        problems.append(problem("body", "endpoint", msg, "value_error"))
    seconds = None
    if body.timestamp is not None:
        seconds = parse_time(body.timestamp)
        if seconds is None:
            msg = "Input should be a valid datetime (YYYY-MM-DD hh:mm:ss)"
            problems.append(problem("body", "timestamp", msg, "datetime_parsing"))
    if problems:
        raise UnifyValidation(problems)
    return body, model, provider, seconds
