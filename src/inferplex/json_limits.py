"""Caps on the shape of a decoded JSON body: nesting depth, items per array or object, characters per string.

A body within the byte limit can still be built to hurt: a field nested a few hundred levels deep parses,
validates (an unknown field is kept as it is) and then fails where the gateway serialises it again (orjson
stops at 255 levels, so forwarding it was a 500), and a body of millions of tiny items costs far more to
validate than its size suggests. Every route that reads JSON checks its body here right after decoding,
before any validation, and refuses a body past a cap with a 400 naming the top-level field.

The check costs little next to decoding the body. A small body (up to 4 KiB, the usual chat request)
is first ruled out by counting its brackets and commas (it cannot nest past the cap with fewer opening
brackets than the cap); anything else is walked once, breadth first and without recursion, at a cost per
value rather than per byte, so a long text costs almost nothing. Measured on this machine (timeit, in
docs/limits.md): about 1.5 us for a 675-byte chat body, as much as decoding it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferplex.errors import InvalidRequest

# Bodies up to this size are first ruled out by counting their brackets (see `_cannot_exceed`).
SCAN_BYTES = 4096


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """`max_depth` counts the body object itself as level 1; `max_items` applies to every array and object;
    `max_string_chars` to every string, keys included (OpenAI's own cap is 10,485,760 characters)."""

    max_depth: int = 64
    max_items: int = 100_000
    max_string_chars: int = 10_485_760


DEFAULT_LIMITS = JsonLimits()


def check(body: bytes, value: Any, limits: JsonLimits = DEFAULT_LIMITS) -> None:
    """Raise a 400 if `value` (decoded from `body`) exceeds a cap."""
    strings = len(body) > limits.max_string_chars
    if not strings and _cannot_exceed(body, limits, 0):
        return
    if _violation(value, limits, strings, 1) is not None:
        _refuse(value, limits, strings)


def check_field(text: str, name: str, value: Any, limits: JsonLimits = DEFAULT_LIMITS) -> None:
    """`check` for a JSON value sent as one field of a form: it sits where a member of a body would."""
    raw = text.encode()
    strings = len(raw) > limits.max_string_chars
    if not strings and _cannot_exceed(raw, limits, 1):
        return
    if (problem := _violation(value, limits, strings, 2)) is not None:
        raise _error(problem, limits, name)


def _cannot_exceed(raw: bytes, limits: JsonLimits, above: int) -> bool:
    """True when a small `raw` has too few brackets to nest past the cap (`above` levels over it) and too
    few bytes or commas for an array or object past the item cap. Counting costs about a nanosecond a
    byte, so a larger body is walked instead, which costs per value, not per byte (a long text is cheap)."""
    if len(raw) > SCAN_BYTES or raw.count(b"{") + raw.count(b"[") + above > limits.max_depth:
        return False
    return len(raw) <= 2 * limits.max_items or raw.count(b",") < limits.max_items


def _violation(top: Any, limits: JsonLimits, strings: bool, depth: int) -> str | None:
    """Which cap `top` (at level `depth`) exceeds, if any: breadth first, one list of containers a level."""
    if type(top) is str:
        return "string" if strings and len(top) > limits.max_string_chars else None
    if type(top) is not dict and type(top) is not list:
        return None
    level: list[Any] = [top]
    max_items, max_chars = limits.max_items, limits.max_string_chars
    while level:
        if depth > limits.max_depth:
            return "depth"
        below: list[Any] = []
        for container in level:
            if len(container) > max_items:
                return "items"
            if type(container) is dict:
                if strings and any(len(k) > max_chars for k in container):
                    return "string"
                container = container.values()
            for item in container:
                kind = type(item)
                if kind is dict or kind is list:
                    below.append(item)
                elif strings and kind is str and len(item) > max_chars:
                    return "string"
        level = below
        depth += 1
    return None


def _refuse(value: Any, limits: JsonLimits, strings: bool) -> None:
    """Raise the error for a body known to exceed a cap, naming the top-level field that does."""
    if type(value) is dict:
        for name, member in value.items():
            if (problem := _violation(member, limits, strings, 2)) is not None:
                raise _error(problem, limits, str(name))
    raise _error(_violation(value, limits, strings, 1) or "items", limits, None)


def _error(problem: str, limits: JsonLimits, param: str | None) -> InvalidRequest:
    where = f" (in '{param}')" if param else ""
    if problem == "depth":
        message = f"The JSON body is nested more than {limits.max_depth} levels deep{where}."
        code = "json_too_deep"
    elif problem == "items":
        message = f"An array or object in the JSON body has more than {limits.max_items} items{where}."
        code = "json_too_large"
    else:
        message = f"A string in the JSON body is longer than {limits.max_string_chars} characters{where}."
        code = "string_too_long"
    return InvalidRequest(message, param=param, code=code)
