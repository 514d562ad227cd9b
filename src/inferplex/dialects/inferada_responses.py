"""What Inferada's standalone routes answer, as TypedDicts (see `inferada.py` and `inferada_language.py`).

Described for `/openapi.json` and for the tests that validate real answers; the routes build plain dicts.
`/v2/check` and `/v2/languages` are LanguageTool's public HTTP API (its field names, camelCase included), so
a LanguageTool client reads them unchanged; the rest are Inferada's. Shapes Inferada does not publish
(redact's and restore's answers) are marked as inferred in docs/dialects.md.
"""

from __future__ import annotations

from typing_extensions import TypedDict


class InferadaError(TypedDict):
    """Every error on Inferada's routes; the same id is in the `x-request-id` header."""

    error: str
    request_id: str


# ---- PII ------------------------------------------------------------------------------------------------


class PiiEntity(TypedDict):
    type: str
    text: str
    start: int
    end: int
    score: float


class PiiAnalysis(TypedDict):
    has_pii: bool
    entities: list[PiiEntity]
    entity_types_found: list[str]


class PiiRedaction(TypedDict):
    """Inferred: the redacted text and the mapping the caller keeps for `/v1/pii/restore`."""

    redacted_text: str
    mapping: dict[str, str]
    has_pii: bool
    entity_types_found: list[str]


class PiiRestoration(TypedDict):
    """Inferred: the text with the mapping's placeholders replaced, and how many were."""

    restored_text: str
    placeholders_restored: int


# ---- language -------------------------------------------------------------------------------------------


class Correction(TypedDict):
    """One applied correction; offsets in characters (code points) of `original`."""

    offset: int
    length: int
    original: str
    replacement: str


class LanguageCorrection(TypedDict):
    original: str
    corrected: str
    corrections_applied: int
    language: str
    corrections: list[Correction]


class LtSoftware(TypedDict):
    name: str
    version: str
    buildDate: str
    apiVersion: int
    premium: bool
    status: str


class LtDetectedLanguage(TypedDict):
    name: str
    code: str
    confidence: float


class LtLanguage(TypedDict):
    name: str
    code: str
    detectedLanguage: LtDetectedLanguage


class LtReplacement(TypedDict):
    value: str


class LtContext(TypedDict):
    text: str
    offset: int
    length: int


class LtCategory(TypedDict):
    id: str
    name: str


class LtRule(TypedDict):
    id: str
    description: str
    issueType: str
    category: LtCategory


class LtType(TypedDict):
    typeName: str


class LtMatch(TypedDict):
    """One issue; `offset` and `length` count UTF-16 code units, as LanguageTool (Java) does."""

    message: str
    shortMessage: str
    replacements: list[LtReplacement]
    offset: int
    length: int
    context: LtContext
    sentence: str
    type: LtType
    rule: LtRule
    ignoreForIncompleteSentence: bool
    contextForSureMatch: int


class LtWarnings(TypedDict):
    incompleteResults: bool


class LtCheck(TypedDict):
    software: LtSoftware
    warnings: LtWarnings
    language: LtLanguage
    matches: list[LtMatch]


class LtLanguageEntry(TypedDict):
    name: str
    code: str
    longCode: str


# ---- services -------------------------------------------------------------------------------------------


class InferadaService(TypedDict):
    id: str
    scope: str
    name: str
    active: bool
    is_default: bool


class ServiceList(TypedDict):
    services: list[InferadaService]
