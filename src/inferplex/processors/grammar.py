"""The grammar half of `spellcheck`: a few rules that are right almost every time they fire.

A full grammar checker (LanguageTool) is a Java server with hundreds of megabytes of rules, and no offline
Python package of that kind ships on PyPI, so the gateway applies only rules whose fix is unambiguous:

- a word repeated by mistake (`the the`; `had had` and `that that` are English and are kept), every language;
- a space before a comma or full stop (and before `;:!?` except in French, whose typography wants one);
- a sentence (or the text) starting with a lowercase letter, after a full stop that ends a word, not an
  abbreviation (`e.g.`) or a number;
- English only: `a`/`an` by the next word's sound (with the usual exceptions: `an hour`, `a university`),
  and the pronoun `i` (`i'm`, `i've`) capitalised.

Code spans, fenced blocks, URLs and e-mail addresses are left alone. Each fix is reported as
`{"from", "to", "rule"}`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_PROTECTED = re.compile(r"```.*?```|`[^`\n]*`|https?://\S+|\S+@\S+", re.DOTALL)
_REPEAT = re.compile(r"\b([^\W\d_]+)(\s+)\1\b")
_REPEAT_KEPT = frozenset({"had", "that", "bye", "very", "so", "no", "yes", "ha", "knock", "tut", "pretty"})
_SPACE_BEFORE = re.compile(r"(\w+)[ \t]+([,.])(?=\s|$)")
_SPACE_BEFORE_MORE = re.compile(r"(\w+)[ \t]+([;:!?])(?=\s|$)")
_SENTENCE = re.compile(r"(?:^|(?<=[.!?])\s+)([a-z][\w'-]*)")
_ABBREVIATION = re.compile(r"(?:\b\w\.\w\.|\b(?:etc|vs|approx|cf|resp|incl|ca|no|nr|fig|eq)\.|\d\.)\s*$", re.I)
_ARTICLE = re.compile(r"\b(a|an|A|An)(\s+)([A-Za-z][\w'-]*)")
_PRONOUN = re.compile(r"(?<![\w'.-])i(?='(?:m|ve|ll|d)\b|[\s,;:!?)]|$)")
# After these an article is a letter ("option a or b"), never a mistake to fix.
_NOT_A_NOUN = frozenset({"and", "or", "nor", "of", "in", "on", "at", "as", "to", "if", "is", "it", "by", "for"})
# Words whose first letter misleads: a vowel sounding like "you"/"w", or a silent h.
_A_BEFORE = re.compile(r"^(uni|use|usu|uti|ure|eu|ewe|one|once|ubiq)", re.I)
_AN_BEFORE = re.compile(r"^(hour|honest|honou?r|heir)", re.I)

Fix = dict[str, str]
Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str], str], str | None]]


def _article(word: str) -> str | None:
    """The article the word takes, or None when its sound cannot be told from its spelling (an acronym)."""
    if word.isupper() or word.lower() in _NOT_A_NOUN:
        return None
    if _AN_BEFORE.match(word):
        return "an"
    if _A_BEFORE.match(word):
        return "a"
    return "an" if word[0].lower() in "aeiou" else "a"


def _rules(language: str) -> list[Rule]:
    """The rules for a language, each a (name, pattern, fix) where fix returns the replacement or None."""

    def repeat(m: re.Match[str], text: str) -> str | None:
        word = m.group(1)
        return None if word.lower() in _REPEAT_KEPT else word

    def space(m: re.Match[str], text: str) -> str | None:
        return m.group(1) + m.group(2)

    def capital(m: re.Match[str], text: str) -> str | None:
        if _ABBREVIATION.search(text, 0, m.start()):
            return None
        word = m.group(1)
        return m.group(0)[: -len(word)] + word[0].upper() + word[1:]

    rules: list[Rule] = [("repeated_word", _REPEAT, repeat), ("space_before_punctuation", _SPACE_BEFORE, space)]
    if language != "fr":
        rules.append(("space_before_punctuation", _SPACE_BEFORE_MORE, space))
    rules.append(("sentence_start", _SENTENCE, capital))
    if language == "en":

        def article(m: re.Match[str], text: str) -> str | None:
            right = _article(m.group(3))
            if right is None or m.group(1).lower() == right:
                return None
            first = right.capitalize() if m.group(1)[0].isupper() else right
            return first + m.group(2) + m.group(3)

        rules.append(("a_an", _ARTICLE, article))
        rules.append(("pronoun_i", _PRONOUN, lambda m, text: "I"))
    return rules


def _apply(text: str, name: str, pattern: re.Pattern[str], fix: Callable[..., str | None], out: list[Fix]) -> str:
    protected = [(m.start(), m.end()) for m in _PROTECTED.finditer(text)]

    def one(m: re.Match[str]) -> str:
        if any(s <= m.start() < e or s < m.end() <= e for s, e in protected):
            return m.group(0)
        replacement = fix(m, text)
        if replacement is None or replacement == m.group(0):
            return m.group(0)
        out.append({"from": m.group(0).strip(), "to": replacement.strip(), "rule": name})
        return replacement

    return pattern.sub(one, text)


def fix_grammar(text: str, language: str) -> tuple[str, list[Fix]]:
    """`text` with the rules of `language` applied in turn, and each fix made."""
    fixes: list[Fix] = []
    for name, pattern, fix in _rules(language):
        text = _apply(text, name, pattern, fix, fixes)
    return text, fixes
