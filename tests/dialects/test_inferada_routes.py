"""Inferada's standalone routes (seed 004's reference: PII, language, LanguageTool's `/v2`, services) through
HTTP, as Inferada's and LanguageTool's clients call them. Every answer, success or error, is also checked
against the schema `/openapi.json` declares for its status (`tests/test_openapi.Caller`).

None of these routes reaches a model: the fake upstream must see nothing, and nothing is billed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.test_openapi import Caller

PII_ROUTES = ("/v1/pii/analyse", "/v1/pii/redact", "/v1/pii/restore")
LANGUAGE_ROUTES = ("/v1/language/correct", "/v2/check")
DUTCH = "Jan Jansen woont in Amsterdam. Mail: jan@example.nl, bel +31 20 123 4567, IBAN NL91 ABNA 0417 1643 00."


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    with GatewayServer(openai_config(fake_openai)) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def call(server: GatewayServer) -> Caller:
    return Caller(server, server.auth)


def _key(server: GatewayServer, *scopes: str) -> Caller:
    made = httpx.post(
        server.url + "/admin/keys", headers=server.auth, json={"name": "-".join(scopes), "scopes": list(scopes)}
    )
    assert made.status_code == 201, made.text
    return Caller(server, {"Authorization": f"Bearer {made.json()['key']}"})


def inferada_error(response: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    """Inferada's error: exactly `error` and `request_id`, the id in `x-request-id`, never a 5xx."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "request_id"}
    assert body["request_id"] == response.headers["x-request-id"] and body["request_id"]
    for word in words:
        assert word.lower() in body["error"].lower(), body["error"]
    return body


@pytest.fixture(autouse=True)
def _no_upstream_call(fake_openai: FakeOpenAI) -> Iterator[None]:
    before = len(fake_openai.state.requests)
    yield
    assert len(fake_openai.state.requests) == before, "an Inferada standalone route called a model"


# ---- PII --------------------------------------------------------------------------------------------------


def test_analyse_finds_each_entity_with_its_span_and_score(call: Caller) -> None:
    response = call("POST", "/v1/pii/analyse", json={"text": DUTCH, "language": "nl", "score_threshold": 0.7})
    assert response.status_code == 200
    assert response.headers["x-request-id"]
    body = response.json()
    assert body["has_pii"] is True
    found = {e["type"]: e for e in body["entities"]}
    assert {"EMAIL_ADDRESS", "PHONE_NUMBER", "IBAN_CODE"} <= found.keys()
    for entity in body["entities"]:
        assert DUTCH[entity["start"] : entity["end"]] == entity["text"]
        assert 0.7 <= entity["score"] <= 1
    assert found["EMAIL_ADDRESS"]["text"] == "jan@example.nl"
    assert found["PHONE_NUMBER"]["text"] == "+31 20 123 4567"
    assert body["entity_types_found"] == list(dict.fromkeys(e["type"] for e in body["entities"]))


def test_analyse_threshold_and_language_region(call: Caller) -> None:
    named = "Please call Mr. Smith on 020 123 4567."
    low = call("POST", "/v1/pii/analyse", json={"text": named, "score_threshold": 0.5}).json()
    assert [e["type"] for e in low["entities"]] == ["PERSON", "PHONE_NUMBER"]  # nl default: a Dutch number
    high = call("POST", "/v1/pii/analyse", json={"text": named, "score_threshold": 0.8}).json()
    assert [e["type"] for e in high["entities"]] == ["PHONE_NUMBER"]  # the name cue is a heuristic: 0.75
    american = call("POST", "/v1/pii/analyse", json={"text": named, "language": "en-US"}).json()
    assert "PHONE_NUMBER" not in american["entity_types_found"]  # not a valid number in the US
    clean = call("POST", "/v1/pii/analyse", json={"text": "Nothing personal here."}).json()
    assert clean == {"has_pii": False, "entities": [], "entity_types_found": []}


def test_redact_then_restore_round_trip(call: Caller) -> None:
    text = "Mail jan@example.nl or piet@example.nl; jan@example.nl again. Card 4111 1111 1111 1111."
    redacted = call("POST", "/v1/pii/redact", json={"text": text}).json()
    assert redacted["redacted_text"] == (
        "Mail <EMAIL_ADDRESS_1> or <EMAIL_ADDRESS_2>; <EMAIL_ADDRESS_1> again. Card <CREDIT_CARD_1>."
    )
    assert redacted["mapping"] == {
        "<EMAIL_ADDRESS_1>": "jan@example.nl",
        "<EMAIL_ADDRESS_2>": "piet@example.nl",
        "<CREDIT_CARD_1>": "4111 1111 1111 1111",
    }
    assert redacted["has_pii"] is True and redacted["entity_types_found"] == ["EMAIL_ADDRESS", "CREDIT_CARD"]
    answer = "I wrote to <EMAIL_ADDRESS_2> and <EMAIL_ADDRESS_1>; <UNKNOWN_1> stays."
    restored = call("POST", "/v1/pii/restore", json={"text": answer, "mapping": redacted["mapping"]}).json()
    assert restored == {
        "restored_text": "I wrote to piet@example.nl and jan@example.nl; <UNKNOWN_1> stays.",
        "placeholders_restored": 2,
    }


def test_restore_keeps_nothing_so_no_caller_reads_anothers_originals(server: GatewayServer) -> None:
    alice, mallory = _key(server, "pii"), _key(server, "pii")
    redacted = alice("POST", "/v1/pii/redact", json={"text": "alice@example.com"}).json()
    assert redacted["redacted_text"] == "<EMAIL_ADDRESS_1>"
    # Mallory knows the placeholder but not the mapping: the gateway holds none to give her.
    stolen = mallory("POST", "/v1/pii/restore", json={"text": "<EMAIL_ADDRESS_1>", "mapping": {}}).json()
    assert stolen == {"restored_text": "<EMAIL_ADDRESS_1>", "placeholders_restored": 0}
    missing = mallory("POST", "/v1/pii/restore", json={"text": "<EMAIL_ADDRESS_1>"})
    inferada_error(missing, 400, "mapping")
    # A restored value that looks like a placeholder is not restored again (one pass).
    chained = {"<A_1>": "<B_1>", "<B_1>": "secret"}
    once = alice("POST", "/v1/pii/restore", json={"text": "<A_1>", "mapping": chained}).json()
    assert once["restored_text"] == "<B_1>"
    inferada_error(alice("POST", "/v1/pii/restore", json={"text": "x", "mapping": {"": "y"}}), 400, "mapping")


# ---- language ---------------------------------------------------------------------------------------------


def test_language_correct(call: Caller) -> None:
    text = "The qick brown fox jumpd over teh dog."
    response = call("POST", "/v1/language/correct", json={"text": text, "language": "en", "picky": False})
    assert response.status_code == 200
    body = response.json()
    assert body["original"] == text
    assert body["corrected"] == "The pick brown fox jump over the dog."
    assert body["corrections_applied"] == 3 == len(body["corrections"])
    assert body["language"] == "en"
    for c in body["corrections"]:
        assert text[c["offset"] : c["offset"] + c["length"]] == c["original"]
    assert [c["replacement"] for c in body["corrections"]] == ["pick", "jump", "the"]
    published = call("POST", "/v1/language/correct", json={"text": "Teh qick brown fox.", "language": "en"}).json()
    assert published["original"] == "Teh qick brown fox." and published["corrections_applied"] == 1  # not "Teh"
    assert published["corrected"] == "Teh " + published["corrections"][0]["replacement"] + " brown fox."
    auto = call("POST", "/v1/language/correct", json={"text": "Ceci est une phrase avec une fote."}).json()
    assert auto["language"] == "fr"  # `auto`, Inferada's default


def test_languagetool_form_post(call: Caller) -> None:
    """As a LanguageTool client sends it: a urlencoded form, `language` a long code; offsets in UTF-16."""
    text = "Emoji 😀 first. Then a qick fox and http://teh.example but teh end."
    response = call("POST", "/v2/check", data={"text": text, "language": "en-US", "apiKey": "ignored"})
    assert response.status_code == 200
    body = response.json()
    assert body["software"]["apiVersion"] == 1
    assert body["language"]["code"] == "en-US" and body["language"]["name"] == "English"
    assert body["language"]["detectedLanguage"]["code"] == "en"
    first, second = body["matches"]
    utf16 = text.encode("utf-16-le")
    for match, word in ((first, "qick"), (second, "teh")):
        span = utf16[2 * match["offset"] : 2 * (match["offset"] + match["length"])]
        assert span.decode("utf-16-le") == word
        context = match["context"]
        assert context["text"].encode("utf-16-le")[2 * context["offset"] :].decode("utf-16-le").startswith(word)
        assert match["rule"]["issueType"] == "misspelling" and match["rule"]["category"]["id"] == "TYPOS"
        assert match["sentence"] == "Then a qick fox and http://teh.example but teh end."
    assert first["replacements"] == [{"value": "pick"}] and second["replacements"] == [{"value": "the"}]
    assert second["offset"] > len(text) - 10  # the `teh` inside the URL was left alone


def test_languagetool_annotated_text(call: Caller) -> None:
    """LanguageTool's `data`: only the text parts are checked; offsets count the markup, as LanguageTool's."""
    annotation = [
        {"markup": "<p>"},
        {"text": "A "},
        {"markup": "<b>"},
        {"text": "qick"},
        {"markup": "</b>"},
        {"text": " fox."},
        {"markup": "</p>", "interpretAs": "\n\n"},
        {"markup": "<code>qick</code>", "interpretAs": "code"},
    ]
    original = "".join(a.get("text") or a.get("markup") or "" for a in annotation)
    body = call("POST", "/v2/check", data={"data": json.dumps({"annotation": annotation}), "language": "en"}).json()
    (match,) = body["matches"]  # the markup's own "qick" is not checked
    assert original[match["offset"] : match["offset"] + match["length"]] == "qick"
    assert match["offset"] == len("<p>A <b>") and match["sentence"] == "A qick fox."
    assert match["context"]["text"][match["context"]["offset"] :].startswith("qick</b>")
    both = call("POST", "/v2/check", data={"text": "x", "data": json.dumps({"annotation": []})})
    inferada_error(both, 400, "not both")
    for bad in ("nope", "[]", '{"annotation": [{"text": 1}]}', '{"annotation": [{"markup": "<b>", "text": "x"}]}'):
        inferada_error(call("POST", "/v2/check", data={"data": bad, "language": "en"}), 400, "'data'")
    inferada_error(call("POST", "/v2/check", data={"language": "en"}), 400, "'text' (or 'data')")


def test_languagetool_premium_clients_send_the_key_in_the_form(server: GatewayServer) -> None:
    """LanguageTool Premium's clients put `username` and `apiKey` in the form, with no Authorization header."""
    key = httpx.post(
        server.url + "/admin/keys", headers=server.auth, json={"name": "lt", "scopes": ["language"]}
    ).json()["key"]
    anonymous = Caller(server, {})
    form = {"text": "a qick test", "language": "en-US", "username": "me@example.com"}
    answered = anonymous("POST", "/v2/check", data={**form, "apiKey": key})
    assert answered.status_code == 200 and len(answered.json()["matches"]) == 1
    inferada_error(anonymous("POST", "/v2/check", data={**form, "apiKey": "ipx-wrong"}), 401)
    inferada_error(anonymous("POST", "/v2/check", data=form), 401, "api key")
    no_scope = _key(server, "pii").headers["Authorization"].removeprefix("Bearer ")
    inferada_error(anonymous("POST", "/v2/check", data={**form, "apiKey": no_scope}), 403, "'language' scope")
    # A header, when sent, is the credential, checked before the body is read.
    wrong_header = Caller(server, {"Authorization": "Bearer ipx-wrong"})
    inferada_error(wrong_header("POST", "/v2/check", data={**form, "apiKey": key}), 401)


def test_languagetool_rule_selection_and_json(call: Caller) -> None:
    text = "a qick test"
    rule = call("POST", "/v2/check", data={"text": text, "language": "en"}).json()["matches"][0]["rule"]["id"]
    for off in ({"disabledRules": f"X,{rule}"}, {"disabledCategories": "TYPOS"}, {"enabledOnly": "true"}):
        assert call("POST", "/v2/check", data={"text": text, "language": "en", **off}).json()["matches"] == []
    only = {"enabledOnly": "true", "enabledCategories": "TYPOS"}
    assert len(call("POST", "/v2/check", data={"text": text, "language": "en", **only}).json()["matches"]) == 1
    as_json = call("POST", "/v2/check", json={"text": text, "language": "en"}).json()  # Inferada's own example
    assert [m["replacements"] for m in as_json["matches"]] == [[{"value": "pick"}]]
    bad = call("POST", "/v2/check", data={"text": text, "enabledOnly": "maybe"})
    inferada_error(bad, 400, "enabledOnly")


def test_languagetool_languages(call: Caller) -> None:
    response = call("GET", "/v2/languages")
    assert response.status_code == 200
    languages = response.json()
    assert {"name": "English", "code": "en", "longCode": "en"} in languages
    assert {"name": "Dutch", "code": "nl", "longCode": "nl"} in languages
    assert all(set(entry) == {"name", "code", "longCode"} for entry in languages)


def test_unsupported_language_is_a_422(call: Caller) -> None:
    for path in LANGUAGE_ROUTES:
        inferada_error(call("POST", path, json={"text": "hallo", "language": "xx"}), 422, "unsupported language")
    japanese = call("POST", "/v1/language/correct", json={"text": "これは日本語の文章です。", "language": "auto"})
    inferada_error(japanese, 422, "detected as `ja`")
    inferada_error(call("POST", "/v1/pii/analyse", json={"text": "x", "language": "not a code!"}), 422, "language")


# ---- services ---------------------------------------------------------------------------------------------


def test_services_per_scope(call: Caller, server: GatewayServer) -> None:
    every = call("GET", "/v1/services").json()["services"]
    assert [s["scope"] for s in every] == ["completions", "pii", "language", "stt", "tts"]
    assert all(set(s) == {"id", "scope", "name", "active", "is_default"} for s in every)
    by_scope = {s["scope"]: s for s in every}
    assert by_scope["pii"]["active"] and by_scope["pii"]["is_default"]
    assert not by_scope["stt"]["active"] and not by_scope["tts"]["active"]  # until media lands
    assert [s["scope"] for s in call("GET", "/v1/services", params={"scope": "stt"}).json()["services"]] == ["stt"]
    inferada_error(call("GET", "/v1/services", params={"scope": "video"}), 400, "scope")
    pii_only = _key(server, "pii")
    assert [s["scope"] for s in pii_only("GET", "/v1/services").json()["services"]] == ["pii"]
    assert pii_only("GET", "/v1/services", params={"scope": "language"}).json() == {"services": []}
    service_id = by_scope["pii"]["id"]
    named = call("POST", "/v1/pii/analyse", json={"text": "a@b.nl", "service_id": service_id})
    assert named.json()["has_pii"] is True
    wrong = call("POST", "/v1/language/correct", json={"text": "a", "service_id": service_id})
    inferada_error(wrong, 404, "service not found")
    inferada_error(call("POST", "/v2/check", data={"text": "a", "service_id": "nope"}), 404, "nope")


# ---- scopes and errors ------------------------------------------------------------------------------------


def test_each_route_needs_its_scope(server: GatewayServer) -> None:
    chat_only, pii_only, language_only = _key(server, "chat"), _key(server, "pii"), _key(server, "language")
    body = {"text": "x", "mapping": {}}
    for path in PII_ROUTES:
        inferada_error(chat_only("POST", path, json=body), 403, "'pii' scope")
        inferada_error(language_only("POST", path, json=body), 403, "'pii' scope")
        assert pii_only("POST", path, json=body).status_code == 200
    for path in LANGUAGE_ROUTES:
        inferada_error(pii_only("POST", path, json={"text": "x"}), 403, "'language' scope")
        assert language_only("POST", path, json={"text": "x", "language": "en"}).status_code == 200
    inferada_error(pii_only("GET", "/v2/languages"), 403, "'language' scope")
    assert language_only("GET", "/v2/languages").status_code == 200
    assert [s["scope"] for s in chat_only("GET", "/v1/services").json()["services"]] == ["completions"]


def test_errors_in_inferadas_shape(call: Caller, server: GatewayServer) -> None:
    stranger = Caller(server, {"Authorization": "Bearer ipx-not-a-key"})
    for method, path in [*(("POST", p) for p in (*PII_ROUTES, *LANGUAGE_ROUTES)), ("GET", "/v2/languages")]:
        inferada_error(stranger(method, path, json={"text": "x"}), 401)
    inferada_error(Caller(server, {})("GET", "/v1/services"), 401, "api key")
    for path in (*PII_ROUTES, "/v1/language/correct"):
        inferada_error(call("POST", path, content=b"{nope", headers={"content-type": "application/json"}), 400)
        inferada_error(call("POST", path, json={"language": "en"}), 400, "missing required parameter: 'text'")
        inferada_error(call("POST", path, json=["text"]), 400, "json object")
        inferada_error(call("POST", path, data={"text": "x"}), 400, "application/json")  # a form: only /v2/check
        inferada_error(call("POST", path, json={"text": "x" * 70_000}), 413, "larger than")
    inferada_error(call("POST", "/v2/check", content=b"text=x", headers={"content-type": "text/plain"}), 400)
    inferada_error(call("POST", "/v1/pii/analyse", json={"text": "x", "score_threshold": 2}), 400, "score_threshold")


def test_errors_before_any_route_also_carry_the_request_id(server: GatewayServer) -> None:
    for method, path, status in (
        ("GET", "/v1/pii/analyse", 405),
        ("POST", "/v2/languages", 405),
        ("GET", "/v2/words", 404),
        ("GET", "/v1/language/nope", 404),
    ):
        inferada_error(httpx.request(method, server.url + path, headers=server.auth), status)
