"""Inferada's PII routes on the gateway's own detectors (`processors/pii_detect.py`): analyse, redact, restore.

Entity types are named as Inferada names them (Presidio's names: `PERSON`, `LOCATION`, `EMAIL_ADDRESS`, ...),
mapped from the detectors' kinds. The detectors give no probability, so each kind has a fixed score saying
how far it can be trusted: a checksum-validated number 1.0, a validated pattern 0.9 to 0.95, a cue-based
heuristic (names, street addresses) 0.75; `score_threshold` (default 0.7, Inferada's) drops the kinds below
it. Placeholders are Inferada's `<TYPE_N>`, numbered per type, the same one for the same value.

Restore keeps nothing on the server: `/v1/pii/redact` answers the mapping and `/v1/pii/restore` takes it
back from the caller, which is Inferada's published workflow ("keep the mapping"). So no account can ever
read another's originals (the only originals a restore can produce are the ones its caller sent), nothing
personal is stored, nothing expires under a caller, and any replica can answer the restore.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from inferplex.dialects.inferada_responses import PiiAnalysis, PiiEntity, PiiRedaction, PiiRestoration
from inferplex.errors import InvalidRequest, UnsupportedLanguage
from inferplex.processors.credentials import Span, replace_spans
from inferplex.processors.pii_detect import ALL_KINDS, find_pii

DEFAULT_LANGUAGE = "nl"  # Inferada's documented default
TYPE_NAMES = {
    "NAME": "PERSON",
    "ADDRESS": "LOCATION",
    "EMAIL": "EMAIL_ADDRESS",
    "PHONE": "PHONE_NUMBER",
    "CARD": "CREDIT_CARD",
    "IBAN": "IBAN_CODE",
    "NATIONAL_ID": "NATIONAL_ID",
    "IP_ADDRESS": "IP_ADDRESS",
    "CREDENTIAL": "CREDENTIAL",
}
SCORES = {
    "CARD": 1.0,
    "IBAN": 1.0,
    "NATIONAL_ID": 1.0,
    "EMAIL": 0.95,
    "IP_ADDRESS": 0.95,
    "PHONE": 0.9,
    "CREDENTIAL": 0.9,
    "ADDRESS": 0.75,
    "NAME": 0.75,
}
assert TYPE_NAMES.keys() == SCORES.keys() == ALL_KINDS, "a detector kind without a name or a score"
# The country whose phone numbering a bare language implies; `xx-YY` names its country itself.
REGIONS = {"nl": "NL", "en": "US", "de": "DE", "fr": "FR", "es": "ES", "it": "IT", "pt": "PT", "pl": "PL"}
_LANGUAGE = re.compile(r"^([A-Za-z]{2,3})(?:[-_]([A-Za-z]{2}|\d{3}))?(?:[-_][A-Za-z0-9]{2,8})*$")


def region_for(language: str | None) -> str:
    """The default phone region for `language`: its country subtag, else the language's country, else US."""
    code = language or DEFAULT_LANGUAGE
    m = _LANGUAGE.match(code)
    if m is None:
        raise UnsupportedLanguage(f"Unsupported language: {code!r} (send a code such as `nl` or `en-GB`).")
    if m.group(2) and m.group(2).isalpha():
        return m.group(2).upper()
    return REGIONS.get(m.group(1).lower(), "US")


def _found(text: str, language: str | None, threshold: float) -> list[Span]:
    return [s for s in find_pii(text, ALL_KINDS, region_for(language)) if SCORES[s.kind] >= threshold]


def _types(spans: Iterable[Span]) -> list[str]:
    return list(dict.fromkeys(TYPE_NAMES[s.kind] for s in spans))


def analyse(text: str, language: str | None, threshold: float) -> PiiAnalysis:
    spans = _found(text, language, threshold)
    entities: list[PiiEntity] = [
        {"type": TYPE_NAMES[s.kind], "text": s.value, "start": s.start, "end": s.end, "score": SCORES[s.kind]}
        for s in spans
    ]
    return {"has_pii": bool(spans), "entities": entities, "entity_types_found": _types(spans)}


def redact(text: str, language: str | None, threshold: float) -> PiiRedaction:
    spans = _found(text, language, threshold)
    by_value: dict[tuple[str, str], str] = {}
    counts: dict[str, int] = {}

    def placeholder(kind: str, value: str) -> str:
        name = TYPE_NAMES[kind]
        found = by_value.get((name, value))
        if found is None:
            counts[name] = counts.get(name, 0) + 1
            found = by_value[(name, value)] = f"<{name}_{counts[name]}>"
        return found

    redacted = replace_spans(text, spans, placeholder)
    mapping = {ph: value for (_, value), ph in by_value.items()}
    return {"redacted_text": redacted, "mapping": mapping, "has_pii": bool(spans), "entity_types_found": _types(spans)}


def restore(text: str, mapping: dict[str, str]) -> PiiRestoration:
    """Each placeholder of `mapping` in `text` replaced by its original, in one pass (a restored value that
    looks like a placeholder stays as it is), the longest placeholder first where two start alike."""
    if "" in mapping:
        raise InvalidRequest("Invalid value for 'mapping': a placeholder may not be empty.", param="mapping")
    if not mapping:
        return {"restored_text": text, "placeholders_restored": 0}
    pattern = re.compile("|".join(re.escape(k) for k in sorted(mapping, key=len, reverse=True)))
    count = 0

    def put_back(m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return mapping[m.group()]

    return {"restored_text": pattern.sub(put_back, text), "placeholders_restored": count}
