"""Per-request cache control, in each client's idiom: HTTP's `Cache-Control`, our `x-inferplex-cache` header,
and the body's `cache` object as LiteLLM's clients send it.

| what the caller says                 | in a header                                    | in the body's `cache`  |
|---------------------------------------|------------------------------------------------|------------------------|
| do not read, but store the answer     | `Cache-Control: no-cache` (or ours: `no-cache`) | `"no-cache": true`     |
| do not store                          | `Cache-Control: no-store` (or ours: `no-store`) | `"no-store": true`     |
| only an entry younger than N seconds  | `Cache-Control: max-age=N` (ours: `max-age=N`) | `"s-maxage": N`        |
| keep this answer N seconds            | `x-inferplex-cache: ttl=N`                     | `"ttl": N`             |
| a namespace within the caller's scope | `x-inferplex-cache: namespace=x`               | `"namespace": "x"`     |
| neither read nor store                | `x-inferplex-cache: bypass`                    | `"use-cache": false`   |
| use the cache (mode default_off)      | `x-inferplex-cache: use`                       | `"use-cache": true`    |
| look up paraphrases too               | `x-inferplex-cache: semantic`                  | `"semantic": true`     |
| the similarity a paraphrase needs     | `x-inferplex-cache: threshold=0.9`             | `"threshold": 0.9`     |

Header and body combine: a flag set in either holds; of two `ttl` or `max-age` values the smaller wins; two
different namespaces or thresholds are a 400. A value that does not parse is a 400 naming the parameter, in
the caller's dialect (the edge renders `InvalidRequest`). Unknown `Cache-Control` directives are ignored, as
HTTP says; an unknown `x-inferplex-cache` token or `cache` key is a 400 (they are ours: a typo must not
silently read a stale answer). Read only for a model the cache serves.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from inferplex.errors import InvalidRequest

MAX_NAMESPACE = 128


@dataclass(frozen=True, slots=True)
class Control:
    """What one request asked of the cache. None: it did not say."""

    read: bool = True  # no-cache: False (the answer is still stored)
    store: bool = True  # no-store: False
    bypass: bool = False  # neither read nor store
    use: bool = False  # an explicit opt-in (what mode default_off waits for)
    max_age_s: float | None = None
    ttl_s: float | None = None
    namespace: str | None = None
    semantic: bool | None = None
    threshold: float | None = None


NONE = Control()


def _number(raw: Any, param: str, *, positive: bool, integer: bool = False) -> float:
    """A finite number (> 0 with `positive`, else >= 0). A header's text is parsed (`param` names a header);
    in the body a number must be a JSON number."""
    value: Any = raw
    if isinstance(raw, str) and not param.startswith("cache."):
        try:
            value = int(raw) if integer else float(raw)
        except ValueError:
            value = None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and (value > 0 if positive else value >= 0):
        return float(value)
    need = "a number greater than 0" if positive else "a number of seconds (0 or more)"
    raise InvalidRequest(f"Invalid value for '{param}': expected {need}, got {raw!r}.", param=param)


def _threshold(raw: Any, param: str) -> float:
    value = _number(raw, param, positive=True)
    if value > 1:
        raise InvalidRequest(f"Invalid value for '{param}': expected a similarity in (0, 1], got {raw!r}.", param=param)
    return value


def _namespace(raw: Any, param: str) -> str:
    if isinstance(raw, str) and 0 < len(raw) <= MAX_NAMESPACE and raw.isprintable():
        return raw
    raise InvalidRequest(
        f"Invalid value for '{param}': expected a non-empty string of at most {MAX_NAMESPACE} characters.",
        param=param,
    )


def _flag(raw: Any, param: str) -> bool:
    if isinstance(raw, bool):
        return raw
    raise InvalidRequest(f"Invalid value for '{param}': expected true or false, got {raw!r}.", param=param)


def from_cache_control(value: str) -> Control:
    """HTTP's `Cache-Control` request directives: no-cache, no-store, max-age=N (other directives ignored)."""
    out = NONE
    for item in value.split(","):
        name, _, arg = item.strip().partition("=")
        name = name.strip().lower()
        if name == "no-cache":
            out = replace(out, read=False)
        elif name == "no-store":
            out = replace(out, store=False)
        elif name == "max-age":
            age = _number(arg.strip().strip('"'), "Cache-Control: max-age", positive=False, integer=True)
            out = replace(out, max_age_s=age)
    return out


def from_header(value: str) -> Control:
    """`x-inferplex-cache: bypass | use | semantic | no-cache | no-store | namespace=x, ttl=N, max-age=N,
    threshold=F`, comma separated."""
    out = NONE
    for item in value.split(","):
        token = item.strip()
        if not token:
            continue
        name, eq, arg = token.partition("=")
        name, arg = name.strip().lower(), arg.strip()
        param = f"x-inferplex-cache: {name}"
        if not eq and name in _HEADER_FLAGS:
            out = replace(out, **_HEADER_FLAGS[name])
        elif eq and name == "namespace":
            out = replace(out, namespace=_namespace(arg, param))
        elif eq and name == "ttl":
            out = replace(out, ttl_s=_number(arg, param, positive=True))
        elif eq and name == "max-age":
            out = replace(out, max_age_s=_number(arg, param, positive=False))
        elif eq and name == "threshold":
            out = replace(out, threshold=_threshold(arg, param))
        else:
            raise InvalidRequest(
                f"Invalid value for 'x-inferplex-cache': unknown directive {token!r} (expected bypass, use, "
                "semantic, no-cache, no-store, namespace=, ttl=, max-age=, threshold=).",
                param="x-inferplex-cache",
            )
    return out


_HEADER_FLAGS: dict[str, dict[str, Any]] = {
    "bypass": {"bypass": True},
    "use": {"use": True},
    "semantic": {"semantic": True, "use": True},
    "no-cache": {"read": False},
    "no-store": {"store": False},
}


def from_body(obj: Mapping[str, Any]) -> Control:
    """The body's `cache` object: LiteLLM's keys (no-cache, no-store, ttl, s-maxage, namespace, use-cache)
    and ours (semantic, threshold)."""
    out = NONE
    for key, raw in obj.items():
        param = f"cache.{key}"
        if key == "no-cache":
            out = replace(out, read=not _flag(raw, param))
        elif key == "no-store":
            out = replace(out, store=not _flag(raw, param))
        elif key == "use-cache":
            use = _flag(raw, param)
            out = replace(out, use=use, bypass=not use)
        elif key == "ttl":
            out = replace(out, ttl_s=_number(raw, param, positive=True))
        elif key == "s-maxage":
            out = replace(out, max_age_s=_number(raw, param, positive=False))
        elif key == "namespace":
            out = replace(out, namespace=_namespace(raw, param))
        elif key == "semantic":
            semantic = _flag(raw, param)
            out = replace(out, semantic=semantic, use=out.use or semantic)
        elif key == "threshold":
            out = replace(out, threshold=_threshold(raw, param))
        else:
            raise InvalidRequest(
                f"Unknown parameter 'cache.{key}' (expected no-cache, no-store, ttl, s-maxage, namespace, "
                "use-cache, semantic, threshold).",
                param=param,
            )
    return out


def _smaller(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _one(a: Any, b: Any, name: str) -> Any:
    if a is not None and b is not None and a != b:
        raise InvalidRequest(f"Two different cache {name}s were given ({a!r} and {b!r}).", param=f"cache.{name}")
    return a if a is not None else b


def combine(a: Control, b: Control) -> Control:
    """Two sources of control as one: flags from either, the smaller ttl and max-age, one namespace."""
    return Control(
        read=a.read and b.read,
        store=a.store and b.store,
        bypass=a.bypass or b.bypass,
        use=a.use or b.use,
        max_age_s=_smaller(a.max_age_s, b.max_age_s),
        ttl_s=_smaller(a.ttl_s, b.ttl_s),
        namespace=_one(a.namespace, b.namespace, "namespace"),
        semantic=a.semantic if b.semantic is None else b.semantic if a.semantic is None else a.semantic or b.semantic,
        threshold=_one(a.threshold, b.threshold, "threshold"),
    )


def parse(headers: Mapping[str, str] | None, body: Mapping[str, Any] | None) -> Control:
    """The request's control from its headers (None outside an HTTP request: a batch line) and its body's
    `cache` object (None when absent)."""
    out = NONE
    if headers is not None:
        for name, parser in (("cache-control", from_cache_control), ("x-inferplex-cache", from_header)):
            for value in _values(headers, name):
                out = combine(out, parser(value))
    if body:
        out = combine(out, from_body(body))
    return out


def _values(headers: Mapping[str, str], name: str) -> list[str]:
    """Every value of a header sent more than once (Starlette's `getlist`), or the one value."""
    getlist = getattr(headers, "getlist", None)
    if getlist is not None:
        return list(getlist(name))
    value = headers.get(name)
    return [] if value is None else [value]
