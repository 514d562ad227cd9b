"""What makes two requests the same request: the cache key (pure functions, table-tested in tests/cache).

Two requests share an entry only when they would get the same answer and belong to the same tenant:

- the scope: whose entry it is (`scope_of`): the account (every key of one account) by default, or only the
  key (`cache.scope: key`); "open" for callers without an account (the master key, an open gateway); and
  "shared" only for a model the operator opted into one entry for everyone (`models[].cache.shared`). A
  caller's namespace narrows the scope further, never widens it.
- the request, normalised (`normalised`): field order does not count (keys sorted), a field set to OpenAI's
  documented default is the same as leaving it out (`n: 1`, `temperature: 1`...), fields that do not change
  the answer are out (`stream`, `stream_options`, `user`; the gateway's own keys never reach `wire()`), and
  the model is the resolved public model's name (an alias and its target are one entry).
- whether it streams (a stream is stored as chunks, a buffered answer as one object), and the family.

The entry id is the SHA-256 of all of that: the prompt is never in it, so the header that names an entry
(`x-inferplex-cache-entry`) and the admin's purge by entry reveal nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from inferplex.auth import MASTER, Principal

# Fields that never change the answer (how it is delivered, who asked): left out of the key.
IGNORED = frozenset({"stream", "stream_options", "user"})

# OpenAI's documented defaults, per family: a field equal to its default is the same as absent. Only
# values whose default is documented and fixed (not model-dependent, e.g. not `max_tokens`).
_SAMPLING = {"temperature": 1, "top_p": 1}
DEFAULTS: dict[str, dict[str, Any]] = {
    "chat": {
        **_SAMPLING,
        "n": 1,
        "presence_penalty": 0,
        "frequency_penalty": 0,
        "logprobs": False,
        "parallel_tool_calls": True,
        "response_format": {"type": "text"},
    },
    "embedding": {"encoding_format": "float"},
    "responses": {**_SAMPLING, "parallel_tool_calls": True, "truncation": "disabled"},
}


def _is_default(value: Any, default: Any) -> bool:
    """`value == default`, but a boolean never equals a number (True is not n=1, False is not 0)."""
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool) and value is default
    return bool(value == default)


def normalised(family: str, wire: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The request as the key sees it: `wire` (the family's request JSON, gateway keys already out) without
    the fields that do not change the answer or equal their default, with `model` the public model's name.
    `tool_choice` is its default when it says what the tools already imply ("auto" with tools, "none"
    without). The caller's object is not changed."""
    defaults = DEFAULTS.get(family, {})
    out: dict[str, Any] = {}
    for name, value in wire.items():
        if value is None or name in IGNORED:
            continue
        if name in defaults and _is_default(value, defaults[name]):
            continue
        out[name] = value
    choice = out.get("tool_choice")
    if family == "chat" and choice == ("auto" if out.get("tools") else "none"):
        del out["tool_choice"]
    out["model"] = model
    return out


def scope_of(principal: Principal, scope: str, *, shared: bool) -> str:
    """Whose entry a request may read and write: `shared` (the model's operator opt-in), `open` (the master
    key: the single user of a gateway without accounts), `key:<id>` (scope key, or a key that has no
    account), else `account:<id>`."""
    if shared:
        return "shared"
    if principal.key_id == MASTER.key_id:
        return "open"
    if scope == "key" or principal.account_id is None:
        return f"key:{principal.key_id}"
    return f"account:{principal.account_id}"


def canonical(value: Any) -> bytes:
    """JSON with sorted keys, the same bytes for the same value whatever the order it was written in."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def digest(*parts: str | bytes | None) -> str:
    """SHA-256 (hex) over the parts, each length-prefixed so no two different lists of parts collide."""
    h = hashlib.sha256()
    for part in parts:
        raw = b"\xff" if part is None else part.encode() if isinstance(part, str) else part
        h.update(len(raw).to_bytes(8, "big"))
        h.update(raw)
    return h.hexdigest()


def entry_id(scope: str, namespace: str | None, model: str, stream: bool, body: Mapping[str, Any], family: str) -> str:
    """The entry's id: whose (scope, namespace), what (model, the normalised body, the family), and how it
    is delivered (stream or not)."""
    return digest(scope, namespace, model, b"s" if stream else b"b", canonical(body), family)


def partition_id(scope: str, namespace: str | None, model: str, stream: bool, family: str, exact: Any) -> str:
    """A semantic partition: entries whose every part but the compared text matches exactly."""
    return digest("semantic", scope, namespace, model, b"s" if stream else b"b", family, canonical(exact))
