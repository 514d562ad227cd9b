"""pii_redact and secret_scan through HTTP: what the upstream receives, what the caller gets back, per key."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson

from inferplex.processors.pii import KEEP_PLACEHOLDERS
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

PII_TEXT = (
    "Mail ana.lopez@example.com or call +44 20 7946 0958; card 4111 1111 1111 1111, "
    "IBAN GB82 WEST 1234 5698 7654 32, SSN 536-90-4399, host 10.0.0.12."
)
VALUES = ["ana.lopez@example.com", "+44 20 7946 0958", "4111 1111 1111 1111", "GB82 WEST", "536-90-4399", "10.0.0.12"]


def _chat(http: httpx.Client, content: str, **extra: Any) -> httpx.Response:
    body = {"model": "tiny-mid", "messages": [{"role": "user", "content": content}], **extra}
    return http.post("/chat/completions", json=body)


def _sse(response: httpx.Response) -> tuple[list[dict[str, Any]], bool]:
    chunks, done = [], False
    for line in response.text.splitlines():
        if line.startswith("data: "):
            if line == "data: [DONE]":
                done = True
            else:
                chunks.append(orjson.loads(line[6:]))
    return chunks, done


def test_mask_sends_placeholders_upstream_and_reports_counts_without_values(
    http: httpx.Client, fake_openai: FakeOpenAI
) -> None:
    r = _chat(http, PII_TEXT, processors=["pii_redact"])
    assert r.status_code == 200, r.text
    sent = fake_openai.state.last().body
    upstream_text = sent["messages"][0]["content"]
    assert all(v not in upstream_text for v in VALUES)
    for placeholder in ("[EMAIL_1]", "[PHONE_1]", "[CARD_1]", "[IBAN_1]", "[NATIONAL_ID_1]", "[IP_ADDRESS_1]"):
        assert placeholder in upstream_text
    assert "processors" not in sent and "inferada" not in sent
    body = r.json()
    assert "[EMAIL_1]" in body["choices"][0]["message"]["content"]  # mask: the answer keeps placeholders
    meta = body["processors"]["pii_redact"]
    assert meta["mode"] == "mask" and meta["redacted"] == 6
    assert meta["entities"] == {"CARD": 1, "EMAIL": 1, "IBAN": 1, "IP_ADDRESS": 1, "NATIONAL_ID": 1, "PHONE": 1}
    assert all(v not in orjson.dumps(body["processors"]).decode() for v in VALUES)
    assert body["timings"]["processors_ms"] > 0


def test_same_value_gets_the_same_placeholder_across_messages(http: httpx.Client, fake_openai: FakeOpenAI) -> None:
    body = {
        "model": "tiny-mid",
        "messages": [
            {"role": "system", "content": "Reply to bob@example.org."},
            {"role": "user", "content": [{"type": "text", "text": "bob@example.org and eve@example.org"}]},
        ],
        "processors": ["pii_redact"],
    }
    assert http.post("/chat/completions", json=body).status_code == 200
    sent = fake_openai.state.last().body["messages"]
    assert sent[0]["content"] == "Reply to [EMAIL_1]."
    assert sent[1]["content"][0]["text"] == "[EMAIL_1] and [EMAIL_2]"


def test_restore_buffered_puts_originals_back(http: httpx.Client, fake_openai: FakeOpenAI) -> None:
    r = _chat(http, PII_TEXT, processors=[{"name": "pii_redact", "mode": "restore"}])
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == PII_TEXT
    assert "[EMAIL_1]" in fake_openai.state.last().body["messages"][-1]["content"]
    assert r.json()["processors"]["pii_redact"]["restored"] == 6


def test_restore_asks_the_model_to_keep_placeholders_in_the_one_system_prompt(
    http: httpx.Client, fake_openai: FakeOpenAI
) -> None:
    """A restoring redaction adds its segment to the system prompt (after the model's default, before the
    caller's system messages, as one message): the originals come back only where a placeholder survives."""
    body = {
        "model": "tiny-mid",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PII_TEXT}],
        "processors": [{"name": "pii_redact", "mode": "restore"}],
    }
    assert http.post("/chat/completions", json=body).status_code == 200
    sent = fake_openai.state.last().body["messages"]
    assert [m["role"] for m in sent] == ["system", "user"]
    assert sent[0]["content"] == KEEP_PLACEHOLDERS + "\n\n---\n\nBe brief."
    for processors in (["pii_redact"], [{"name": "pii_redact", "mode": "restore"}]):
        masked = {**body, "processors": processors}  # mask mode, or nothing to redact: no segment
        if processors != ["pii_redact"]:
            masked["messages"] = [body["messages"][0], {"role": "user", "content": "Nothing personal here."}]
        assert http.post("/chat/completions", json=masked).status_code == 200
        assert fake_openai.state.last().body["messages"][0] == {"role": "system", "content": "Be brief."}


def test_restore_in_a_stream_of_tiny_chunks_rebuilds_split_placeholders(
    pgateway: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    client = openai.OpenAI(base_url=pgateway.base_url, api_key=pgateway.master_key, max_retries=0)
    stream = client.chat.completions.create(
        model="tiny-mid",
        messages=[{"role": "user", "content": PII_TEXT}],
        stream=True,
        extra_body={"processors": [{"name": "pii_redact", "mode": "restore"}]},
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(pieces) == PII_TEXT
    upstream_text = fake_openai.state.last().body["messages"][-1]["content"]  # [0]: the system prompt's segment
    # The fake streamed the redacted prompt 1-3 characters at a time: every placeholder arrived split.
    assert upstream_text.count("[") == 6 and len(pieces) > len(upstream_text) // 3
    assert not any("[" in p or "]" in p for p in pieces)  # no placeholder fragment reached the caller


def test_stream_carries_the_processors_block_and_processors_ms(http: httpx.Client) -> None:
    r = _chat(
        http,
        "write to me at zed@example.com",
        processors=[{"name": "pii_redact", "mode": "restore"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks, done = _sse(r)
    assert done
    final = next(c for c in chunks if c.get("choices") and c["choices"][0].get("finish_reason"))
    assert final["processors"]["pii_redact"]["restored"] == 1
    usage_chunk = next(c for c in chunks if c.get("usage"))
    assert usage_chunk["timings"]["processors_ms"] > 0
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices")) == (
        "write to me at zed@example.com"
    )


def test_inferada_spelling_is_accepted_and_answered_in_kind(http: httpx.Client, fake_openai: FakeOpenAI) -> None:
    r = _chat(
        http,
        "mail me: a@b.io",
        inferada={"processors": ["pii_redact"], "pii_redact": {"mode": "restore"}},
        stream=False,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "mail me: a@b.io"
    assert body["inferada"]["pii_redact"]["redacted"] == 1
    assert body["processors"] == body["inferada"]
    assert "inferada" not in fake_openai.state.last().body


def test_enforced_processor_cannot_be_switched_off_or_weakened(
    pgateway: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    with httpx.Client(base_url=pgateway.base_url, headers={"Authorization": "Bearer key-enforced"}) as http:
        r = _chat(http, "I am ana@example.com", processors=[])
        assert r.status_code == 200, r.text
        assert fake_openai.state.last().body["messages"][0]["content"] == "I am [EMAIL_1]"
        assert r.json()["processors"]["pii_redact"]["enforced"] is True
        # The key says mask: a request asking for restore gets the key's mode.
        r = _chat(http, "I am ana@example.com", processors=[{"name": "pii_redact", "mode": "restore"}])
        assert r.json()["choices"][0]["message"]["content"] == "I am [EMAIL_1]"
        r = _chat(http, "I am ana@example.com", inferada={"processors": []}, stream=False)
        assert fake_openai.state.last().body["messages"][0]["content"] == "I am [EMAIL_1]"


def test_key_defaults_apply_unless_the_request_names_its_own(pgateway: GatewayServer) -> None:
    secret = "deploy with AKIAIOSFODNN7EXAMPLE please"
    with httpx.Client(base_url=pgateway.base_url, headers={"Authorization": "Bearer key-defaults"}) as http:
        assert _chat(http, secret).status_code == 422  # default secret_scan blocks
        assert _chat(http, secret, processors=[]).status_code == 200  # an explicit empty list turns defaults off


def test_secret_scan_blocks_with_a_422_naming_the_processor(http: httpx.Client, fake_openai: FakeOpenAI) -> None:
    before = len(fake_openai.state.requests)
    r = _chat(http, "my key is ghp_" + "a1B2" * 9 + " ok", processors=["secret_scan"])
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["code"] == "processor_policy_rejection"
    assert "secret_scan" in err["message"] and "GITHUB_TOKEN" in err["message"]
    assert "a1B2" not in err["message"]
    assert len(fake_openai.state.requests) == before  # nothing went upstream


def test_secret_scan_redact_mode_lets_the_request_through(http: httpx.Client, fake_openai: FakeOpenAI) -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"
    r = _chat(http, f"why does this fail? {pem}", processors=[{"name": "secret_scan", "action": "redact"}])
    assert r.status_code == 200, r.text
    assert fake_openai.state.last().body["messages"][0]["content"] == "why does this fail? [PRIVATE_KEY_1]"
    assert r.json()["processors"]["secret_scan"] == {
        "action": "redact",
        "found": 1,
        "kinds": {"PRIVATE_KEY": 1},
    }


def test_unknown_processor_and_bad_options_are_400(http: httpx.Client) -> None:
    r = _chat(http, "hi", processors=["pii_redact", "telepathy"])
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "unknown_processor"
    assert r.json()["error"]["param"] == "processors[1]"
    assert "telepathy" in r.json()["error"]["message"]
    r = _chat(http, "hi", processors=[{"name": "pii_redact", "mode": "shout"}])
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_processor_options"
    r = _chat(http, "hi", processors="pii_redact")
    assert r.status_code == 400 and r.json()["error"]["param"] == "processors"
    r = _chat(http, "hi", inferada={"processors": ["nope"]}, stream=False)
    assert r.status_code == 400 and r.json()["error"]["code"] == "unknown_processor"
    assert r.json()["error"]["param"] == "inferada.processors[0]"
