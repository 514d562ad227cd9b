"""Table tests for the answer spellcheck's grammar rules, Inferada's meaning of `spellcheck`, and the phone
region `anonymise` reads from a language."""

from __future__ import annotations

import pytest

from inferplex.errors import UnsupportedLanguage
from inferplex.processors.grammar import fix_grammar
from inferplex.processors.pii import region_of
from inferplex.processors.spec import requested
from inferplex.processors.spellcheck import correct_text


@pytest.mark.parametrize(
    ("text", "language", "fixed", "rules"),
    [
        (
            "the cat sat on the the mat .",
            "en",
            "The cat sat on the mat.",
            {"repeated_word", "space_before_punctuation", "sentence_start"},
        ),
        ("It had had enough. That that is.", "en", "It had had enough. That that is.", set()),
        ("It is a apple and an banana.", "en", "It is an apple and a banana.", {"a_an"}),
        ("An hour, a university, an umbrella.", "en", "An hour, a university, an umbrella.", set()),
        ("Choose option a or b. A NASA probe.", "en", "Choose option a or b. A NASA probe.", set()),
        ("Yes, i think i'm right, i.e. sure.", "en", "Yes, I think I'm right, i.e. sure.", {"pronoun_i"}),
        ("See e.g. the docs. and more", "en", "See e.g. the docs. And more", {"sentence_start"}),
        ("Pi is 3. it is round.", "en", "Pi is 3. it is round.", set()),
        ("Bonjour , ça va ? oui !", "fr", "Bonjour, ça va ? Oui !", {"space_before_punctuation", "sentence_start"}),
        ("Hallo , wie geht's ?", "de", "Hallo, wie geht's?", {"space_before_punctuation"}),
        (
            "Run `the the` at https://a.io/x a .",
            "en",
            "Run `the the` at https://a.io/x a.",
            {"space_before_punctuation"},
        ),
        ("```\nx = 1 .\n```", "en", "```\nx = 1 .\n```", set()),
    ],
)
def test_grammar_rules(text: str, language: str, fixed: str, rules: set[str]) -> None:
    out, fixes = fix_grammar(text, language)
    assert out == fixed
    assert {f["rule"] for f in fixes} == rules


def test_spelling_then_grammar() -> None:
    out, fixes = correct_text("teh qiuck fox is a animal", "en")
    assert out == "The quick fox is an animal"
    assert {"from": "qiuck", "to": "quick"} in fixes and any(f.get("rule") == "a_an" for f in fixes)


def test_inferadas_spellcheck_corrects_the_answer_ours_the_prompt() -> None:
    theirs = requested({"inferada": {"processors": ["spellcheck", "anonymise"], "spellcheck": {"language": "fr"}}})
    assert [(s.name, s.options) for s in theirs.specs or []] == [
        ("spellcheck", {"target": "answer", "language": "fr"}),
        ("anonymise", {}),
    ]
    explicit = requested({"inferada": {"processors": ["spellcheck"], "spellcheck": {"target": "prompt"}}})
    assert explicit.specs is not None and explicit.specs[0].options == {"target": "prompt"}
    ours = requested({"processors": ["spellcheck"]})
    assert ours.specs is not None and ours.specs[0].options == {}


@pytest.mark.parametrize(("language", "region"), [("en", "US"), ("nl", "NL"), ("nl-be", "BE"), ("pt_br", "BR")])
def test_anonymise_reads_the_phone_region_from_the_language(language: str, region: str) -> None:
    assert region_of(language) == region


def test_anonymise_refuses_a_language_it_does_not_support() -> None:
    with pytest.raises(UnsupportedLanguage, match="`ja`"):
        region_of("ja")
