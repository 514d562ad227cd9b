"""`spellcheck`: correct spelling and grammar, of the model's answer or of the user's prompt, and report each fix.

`target` chooses which: `answer` (Inferada's published meaning, and the default under Inferada's spelling:
processors/spec.py) corrects the model's answer, which needs the whole answer, so a request with it is
served buffered; `prompt` (the default under ours, as before) corrects user messages before they are sent.
Grammar is the short list of unambiguous rules in `grammar.py`. An answer the request asked to be JSON is
left alone (a corrected key would break it).

pyspellchecker (Norvig's edit-distance method over word-frequency dictionaries shipped in the package) for
the request's language: the `language` option, else `inferada.language`, else the `language` processor's
detection; with none of them the request is refused (422), as Inferada does, rather than guessing. Only user
messages are touched, and only lowercase words of three letters or more: capitalised words, acronyms, words
with digits, URLs, host and file names, e-mail addresses and code spans are left alone (names and
identifiers are not misspellings). A word is corrected only when the dictionary has a candidate; unknown
words stay as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from inferplex.canonical import ChatRequest
from inferplex.errors import InvalidRequest, UnsupportedLanguage
from inferplex.gateway_request import GatewayRequest
from inferplex.processors.base import Again, Env, Exchange, Step, check_options, choice
from inferplex.processors.grammar import fix_grammar
from inferplex.processors.text import map_answer, rewrite
from inferplex.responses import ChatCompletion

LANGUAGES = frozenset({"en", "es", "fr", "it", "pt", "de", "ru", "ar", "eu", "lv", "nl", "fa"})
MAX_CORRECTIONS_REPORTED = 50

_SKIP = re.compile(r"`[^`]*`|https?://\S+|\S+@\S+|\S*\d\S*|\S*\w\.\w\S*")  # code, URLs, mails, hosts, files
_WORD = re.compile(r"(?<![\w'-])[^\W\d_]{3,}(?![\w'-])")


@cache
def checker(language: str) -> Any:
    from spellchecker import SpellChecker

    # Distance 1 for speed: distance 2 costs tens of ms per unknown word, for little gain on typos.
    return SpellChecker(language=language, distance=1)


def correct(text: str, language: str) -> tuple[str, list[dict[str, str]]]:
    """`text` with its misspelt words corrected, and the corrections as {from, to} pairs."""
    spell = checker(language)
    corrections: list[dict[str, str]] = []
    protected = [(m.start(), m.end()) for m in _SKIP.finditer(text)]

    def fix(m: re.Match[str]) -> str:
        word = m.group()
        if not word.islower() or any(s <= m.start() < e for s, e in protected):
            return word
        if spell.known([word]):
            return word
        better = spell.correction(word)
        if not better or better == word:
            return word
        corrections.append({"from": word, "to": better})
        return str(better)

    return _WORD.sub(fix, text), corrections


def correct_text(text: str, language: str) -> tuple[str, list[dict[str, str]]]:
    """Spelling, then grammar (a capital fixed after the word it starts is spelt right)."""
    spelt, corrections = correct(text, language)
    fixed, fixes = fix_grammar(spelt, language)
    return fixed, corrections + fixes


class Spellcheck(Step):
    name = "spellcheck"
    order = 20

    def __init__(self, language: str | None, target: str) -> None:
        super().__init__()
        self.language = language
        self.target = target
        if target == "answer":
            self.buffered = True
            # Before pii_redact (40) in `pre`, so after it on the way back: it sees placeholders, not originals.
            self.order = 45
        self._answer_language: str | None = None

    def _language(self, ex: Exchange) -> str:
        language = self.language or ex.language
        if language is None:
            raise UnsupportedLanguage(
                "Processor `spellcheck` needs the request's language: set `inferada.language`, the processor's "
                "`language` option, or run the `language` processor before it.",
                param="language",
                code="language_required",
            )
        if language not in LANGUAGES:
            raise UnsupportedLanguage(
                f"Processor `spellcheck` does not support the language `{language}` "
                f"(supported: {', '.join(sorted(LANGUAGES))}).",
                param="language",
            )
        return language

    async def pre(self, ex: Exchange, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]:
        language = self._language(ex)  # checked here for both targets: refused before anything is charged
        self.metadata.update(language=language, target=self.target)
        if self.target == "answer":
            fmt = request.body.response_format
            self._answer_language = None if fmt is not None and fmt.type != "text" else language
            if self._answer_language is None:
                self.metadata.update(corrected=0, corrections=[], skipped="the answer is JSON")
            return request
        found: list[dict[str, str]] = []

        def fix(text: str) -> str:
            out, corrections = correct_text(text, language)
            found.extend(corrections)
            return out

        request = rewrite(request, fix, roles=("user",))
        self.metadata.update(corrected=len(found), corrections=found[:MAX_CORRECTIONS_REPORTED])
        return request

    async def post(self, ex: Exchange, response: ChatCompletion, again: Again) -> ChatCompletion:
        language = self._answer_language
        if language is None:
            return response
        found: list[dict[str, str]] = []

        def fix(text: str) -> str:
            out, corrections = correct_text(text, language)
            found.extend(corrections)
            return out

        map_answer(response, fix)
        self.metadata.update(corrected=len(found), corrections=found[:MAX_CORRECTIONS_REPORTED])
        return response


def create(options: Mapping[str, Any], env: Env) -> Spellcheck:
    check_options("spellcheck", options, {"language", "target"})
    language = options.get("language")
    if language is not None and (not isinstance(language, str) or not language):
        raise InvalidRequest("Processor `spellcheck`: `language` must be a code such as `en`.", param="processors")
    target = choice("spellcheck", options, "target", ("prompt", "answer"))
    return Spellcheck(language.lower() if language else None, target)
