"""Which processors run for a request: the request's own list, the key's defaults, the key's enforced ones.

Two spellings are accepted for the request's list, with the same meaning:
- ours: `"processors": ["pii_redact", {"name": "spellcheck", "language": "fr"}]` (a language is an option);
- Inferada's: `"inferada": {"processors": ["pii_redact"], "language": "fr", "pii_redact": {"mode": "restore"}}`
  (per-processor options live beside the list, keyed by the processor's name).

Per key (`Principal.default_processors` / `enforced_processors`): the defaults run when the request names
none (an explicit empty list turns them off); the enforced ones always run, and their options win over the
request's, so a request can neither switch one off nor weaken it. Everything here is pure and table-tested.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inferplex.errors import InvalidRequest

DEFAULTS_KEY = "default_processors"
ENFORCED_KEY = "enforced_processors"

# What an Inferada name means where ours differs, as option defaults under the caller's own: Inferada's
# `spellcheck` corrects the model's answer, ours (named in `processors`) the prompt (docs/processors.md).
INFERADA_MEANING: dict[str, dict[str, Any]] = {"spellcheck": {"target": "answer"}}


@dataclass(frozen=True, slots=True)
class Spec:
    name: str
    options: dict[str, Any] = field(default_factory=dict)
    enforced: bool = False


@dataclass(frozen=True, slots=True)
class Requested:
    specs: list[Spec] | None  # None: the request did not mention processors at all
    language: str | None = None
    inferada: bool = False  # the request used Inferada's spelling: answer with an `inferada` block too


def parse_list(value: Any, param: str, extra: Mapping[str, Any] | None = None) -> list[Spec]:
    """A processor list in either spelling; `extra` holds Inferada's per-name options."""
    if not isinstance(value, list):
        raise InvalidRequest(f"`{param}` must be a list of processor names or objects.", param=param)
    out: list[Spec] = []
    for i, item in enumerate(value):
        if isinstance(item, str) and item:
            options = extra.get(item) if extra is not None else None
            out.append(Spec(item, dict(options) if isinstance(options, Mapping) else {}))
        elif isinstance(item, Mapping) and isinstance(item.get("name"), str) and item["name"]:
            out.append(Spec(item["name"], {k: v for k, v in item.items() if k != "name"}))
        else:
            raise InvalidRequest(
                f"`{param}[{i}]` must be a processor name or an object with a `name`.", param=f"{param}[{i}]"
            )
    return out


def requested(raw: Mapping[str, Any]) -> Requested:
    ours = raw.get("processors")
    theirs = raw.get("inferada")
    if ours is not None:
        return Requested(parse_list(ours, "processors"))
    if theirs is None:
        return Requested(None)
    if not isinstance(theirs, Mapping):
        raise InvalidRequest("`inferada` must be an object.", param="inferada")
    listed = theirs.get("processors")  # absent (only other `inferada` options): the key's defaults still run
    specs = (
        None
        if listed is None
        else [
            Spec(s.name, {**INFERADA_MEANING.get(s.name, {}), **s.options})
            for s in parse_list(listed, "inferada.processors", theirs)
        ]
    )
    return Requested(specs, _language(theirs.get("language"), "inferada.language"), inferada=True)


def _language(value: Any, param: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"`{param}` must be a language code such as `en`.", param=param)
    return value.strip().lower()


def key_specs(value: Sequence[Any], key: str) -> list[Spec]:
    """A key's stored processor list (`Principal.default_processors` / `enforced_processors`), named by
    its setting in errors."""
    return parse_list(list(value), key) if value else []


def merge(request: list[Spec] | None, defaults: list[Spec], enforced: list[Spec]) -> list[Spec]:
    """Enforced first and unweakenable; then the request's (or the defaults when it named none); no duplicates."""
    out: dict[str, Spec] = {}
    for spec in enforced:
        out.setdefault(spec.name, Spec(spec.name, spec.options, enforced=True))
    for spec in defaults if request is None else request:
        if spec.name in out:
            base = out[spec.name]
            # The request may add options the key left open, never change the ones it set.
            out[spec.name] = Spec(spec.name, {**spec.options, **base.options}, enforced=True)
        else:
            out[spec.name] = spec
    return list(out.values())
