"""Inferada's language routes on the gateway's own checker: `/v1/language/correct`, and LanguageTool's public
HTTP API (`/v2/check`, `/v2/languages`) so that LanguageTool clients work unchanged.

The corrections are the `spellcheck` processor's (`processors/spellcheck.correct`: pyspellchecker, lowercase
words of three letters or more, names, code, URLs and addresses left alone), so a route and a processor never
disagree on a word. `correct` reports what it changed but not where; the position of each is found again
with the processor's own word and skip patterns, in the same order: whether a word is corrected depends on
the word alone, so the n-th correction is the n-th unprotected occurrence of a corrected word.

`language` is a code (`en`, `en-US`: the dictionary is the primary subtag's) or `auto`, detected with the
`language` processor's model (py3langid). A language the checker has no dictionary for is a 422 (Inferada's
status for an unsupported language). There is one rule, in one category, so LanguageTool's
`enabledRules`/`disabledRules`/`enabledCategories`/`disabledCategories`/`enabledOnly` decide whether it runs;
`picky` and `level` are accepted with no effect. Offsets on `/v2/check` count UTF-16 code units, as
LanguageTool (Java) and its JavaScript clients do; `/v1/language/correct` counts characters.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

import orjson

from inferplex import __version__
from inferplex.dialects.inferada_responses import (
    Correction,
    LanguageCorrection,
    LtCheck,
    LtLanguageEntry,
    LtMatch,
)
from inferplex.dialects.inferada_wire import CheckRequest, CorrectRequest
from inferplex.errors import InvalidRequest, UnsupportedLanguage
from inferplex.processors.language import detect
from inferplex.processors.spellcheck import _SKIP, _WORD, LANGUAGES, correct

NAMES = {
    "ar": "Arabic",
    "de": "German",
    "en": "English",
    "es": "Spanish",
    "eu": "Basque",
    "fa": "Persian",
    "fr": "French",
    "it": "Italian",
    "lv": "Latvian",
    "nl": "Dutch",
    "pt": "Portuguese",
    "ru": "Russian",
}
RULE_ID = "INFERPLEX_SPELLING_RULE"
CATEGORY = {"id": "TYPOS", "name": "Possible Typo"}
CONTEXT_CHARS = 40  # LanguageTool's default context on each side of a match


@dataclass(frozen=True, slots=True)
class Fix:
    start: int
    end: int
    original: str
    replacement: str


@dataclass(frozen=True, slots=True)
class Document:
    """What `/v2/check` checks (`plain`) and the text its offsets are reported in (`original`, markup
    included, LanguageTool's rule for annotated text); `spans` holds each text part's (plain, original) start."""

    plain: str
    original: str
    spans: tuple[tuple[int, int], ...] = ((0, 0),)

    def position(self, plain_at: int) -> int:
        starts = [p for p, _ in self.spans]
        p, o = self.spans[max(bisect.bisect_right(starts, plain_at) - 1, 0)]
        return o + plain_at - p


@dataclass(frozen=True, slots=True)
class Checked:
    language: str  # the dictionary's code
    named: str  # the code as the caller named it (`en-US`), or the detected one for `auto`
    detected: str
    confidence: float
    corrected: str
    fixes: list[Fix]


def _bad_data(why: str) -> InvalidRequest:
    return InvalidRequest(f"Invalid value for 'data': {why}.", param="data")


def _annotated(data: str) -> Document:
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise _bad_data("not JSON") from None
    items = value.get("annotation") if isinstance(value, dict) else None
    if not isinstance(items, list):
        raise _bad_data('expected {"annotation": [...]}')
    plain: list[str] = []
    original: list[str] = []
    spans: list[tuple[int, int]] = []
    at_plain = at_original = 0
    for item in items:
        text, markup = (item.get("text"), item.get("markup")) if isinstance(item, dict) else (None, None)
        if isinstance(text, str) and markup is None:
            spans.append((at_plain, at_original))
            checked, shown = text, text
        elif isinstance(markup, str) and text is None and isinstance(item.get("interpretAs", ""), str):
            checked, shown = item.get("interpretAs", ""), markup
        else:
            raise _bad_data('each annotation is {"text"} or {"markup", "interpretAs"}')
        plain.append(checked)
        original.append(shown)
        at_plain, at_original = at_plain + len(checked), at_original + len(shown)
    return Document("".join(plain), "".join(original), tuple(spans) or ((0, 0),))


def document(request: CheckRequest) -> Document:
    """The text `/v2/check` was sent: `text`, or LanguageTool's annotated `data` (exactly one of them)."""
    if request.text is not None and request.data is not None:
        raise InvalidRequest("Send either 'text' or 'data', not both.", param="data")
    if request.data is not None:
        return _annotated(request.data)
    if request.text is None:
        raise InvalidRequest("Missing required parameter: 'text' (or 'data').", param="text")
    return Document(request.text, request.text)


def languages() -> list[LtLanguageEntry]:
    return [{"name": NAMES.get(c, c), "code": c, "longCode": c} for c in sorted(LANGUAGES)]


def _language(named: str, text: str) -> tuple[str, str, str, float]:
    """(dictionary, the code to report, the detected code, its confidence) for the caller's `language`."""
    detected, confidence = detect(text) if text.strip() else ("und", 0.0)
    if named.lower() == "auto":
        if detected == "und":  # nothing to detect, nothing to check
            return "en", "en", detected, confidence
        if detected not in LANGUAGES:
            raise UnsupportedLanguage(
                f"Unsupported language: the text was detected as `{detected}`, which this gateway cannot check "
                f"(supported: {', '.join(sorted(LANGUAGES))}); name the language instead of `auto`.",
                param="language",
            )
        return detected, detected, detected, confidence
    primary = re.split(r"[-_]", named, maxsplit=1)[0].lower()
    if primary not in LANGUAGES:
        raise UnsupportedLanguage(
            f"Unsupported language: {named!r} (supported: {', '.join(sorted(LANGUAGES))}, or `auto`).",
            param="language",
        )
    return primary, named, detected, confidence


def fixes(text: str, language: str) -> tuple[str, list[Fix]]:
    """The corrected text and where each correction is (see the module docstring)."""
    corrected, corrections = correct(text, language)
    protected = [(m.start(), m.end()) for m in _SKIP.finditer(text)] if corrections else []
    out: list[Fix] = []
    for m in _WORD.finditer(text):
        if len(out) == len(corrections):
            break
        wanted = corrections[len(out)]
        if m.group() == wanted["from"] and not any(s <= m.start() < e for s, e in protected):
            out.append(Fix(m.start(), m.end(), m.group(), wanted["to"]))
    return corrected, out


def check(text: str, named: str) -> Checked:
    """CPU work (a dictionary's first load takes about a second): the routes run it off the event loop."""
    language, reported, detected, confidence = _language(named, text)
    corrected, found = fixes(text, language)
    return Checked(language, reported, detected, confidence, corrected, found)


def correction(request: CorrectRequest, checked: Checked) -> LanguageCorrection:
    corrections: list[Correction] = [
        {"offset": f.start, "length": f.end - f.start, "original": f.original, "replacement": f.replacement}
        for f in checked.fixes
    ]
    return {
        "original": request.text,
        "corrected": checked.corrected,
        "corrections_applied": len(corrections),
        "language": checked.language,
        "corrections": corrections,
    }


def _ids(value: str | None) -> set[str]:
    return {part.strip() for part in (value or "").split(",") if part.strip()}


def rule_runs(request: CheckRequest) -> bool:
    """Whether LanguageTool's rule selection leaves the gateway's one spelling rule on."""
    if RULE_ID in _ids(request.disabledRules) or CATEGORY["id"] in _ids(request.disabledCategories):
        return False
    if request.enabledOnly:
        return RULE_ID in _ids(request.enabledRules) or CATEGORY["id"] in _ids(request.enabledCategories)
    return True


def _u16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)|\n")


def _sentence(text: str, start: int, end: int) -> str:
    left, right = 0, len(text)
    for m in _SENTENCE_END.finditer(text):
        if m.end() <= start:
            left = m.end()
        elif m.start() >= end:
            right = m.end()
            break
    return text[left:right].strip()


def _match(doc: Document, fix: Fix) -> LtMatch:
    text = doc.original
    start, end = doc.position(fix.start), doc.position(fix.end - 1) + 1
    lo, hi = max(start - CONTEXT_CHARS, 0), min(end + CONTEXT_CHARS, len(text))
    before = ("..." if lo > 0 else "") + text[lo:start]
    after = text[end:hi] + ("..." if hi < len(text) else "")
    length = _u16(text[start:end])
    return {
        "message": "Possible spelling mistake found.",
        "shortMessage": "Spelling mistake",
        "replacements": [{"value": fix.replacement}],
        "offset": _u16(text[:start]),
        "length": length,
        "context": {"text": before + text[start:end] + after, "offset": _u16(before), "length": length},
        "sentence": _sentence(doc.plain, fix.start, fix.end),
        "type": {"typeName": "UnknownWord"},
        "rule": {
            "id": RULE_ID,
            "description": "Possible spelling mistake",
            "issueType": "misspelling",
            "category": {"id": CATEGORY["id"], "name": CATEGORY["name"]},
        },
        "ignoreForIncompleteSentence": False,
        "contextForSureMatch": 0,
    }


def lt_check(request: CheckRequest, doc: Document, checked: Checked) -> LtCheck:
    matches = [_match(doc, f) for f in checked.fixes] if rule_runs(request) else []
    return {
        "software": {
            "name": "Inferplex",
            "version": __version__,
            "buildDate": "",
            "apiVersion": 1,
            "premium": False,
            "status": "",
        },
        "warnings": {"incompleteResults": False},
        "language": {
            "name": NAMES.get(checked.language, checked.language),
            "code": checked.named,
            "detectedLanguage": {
                "name": NAMES.get(checked.detected, checked.detected),
                "code": checked.detected,
                "confidence": round(checked.confidence, 3),
            },
        },
        "matches": matches,
    }
