"""The fakes reject what the real providers reject, so a passing adapter test means a valid request."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.bedrock_upstream import FakeBedrock
from tests.fakes.gemini_upstream import SIGNATURE, FakeGemini, signature_error

HEADERS = {"x-api-key": "sk-ant-fake", "anthropic-version": "2023-06-01"}
GOOD: dict[str, Any] = {"model": "claude-echo-1", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("headers", "body", "status", "message"),
    [
        (HEADERS, GOOD, 200, None),
        ({"anthropic-version": "2023-06-01"}, GOOD, 401, "x-api-key header is required"),
        ({"x-api-key": "sk-ant-fake"}, GOOD, 400, "anthropic-version: header is required"),
        (HEADERS, {**GOOD, "max_tokens": None}, 400, "max_tokens: Field required"),
        (HEADERS, {**GOOD, "n": 2}, 400, "n: Extra inputs are not permitted"),
        (
            HEADERS,
            {**GOOD, "messages": [{"role": "system", "content": "s"}, *GOOD["messages"]]},
            400,
            'Unexpected role "system"',
        ),
        (HEADERS, {**GOOD, "messages": [{"role": "assistant", "content": "a"}]}, 400, "first message"),
        (
            HEADERS,
            {**GOOD, "messages": [*GOOD["messages"], {"role": "user", "content": "again"}]},
            400,
            "roles must alternate",
        ),
        (HEADERS, {**GOOD, "temperature": 1.5}, 400, "less than or equal to 1"),
        (
            HEADERS,
            {**GOOD, "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}]},
            400,
            "non-empty",
        ),
    ],
)
def test_the_anthropic_fake(
    fake_anthropic: FakeAnthropic, headers: dict[str, str], body: dict[str, Any], status: int, message: str | None
) -> None:
    resp = httpx.post(
        fake_anthropic.url + "/v1/messages", headers=headers, json={k: v for k, v in body.items() if v is not None}
    )
    assert resp.status_code == status
    if message is not None:
        assert resp.json()["type"] == "error" and message in resp.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]}, "valid role"),
        ({"contents": [{"role": "user", "parts": [{"text": "x"}]}], "max_tokens": 5}, 'Unknown name "max_tokens"'),
        (
            {
                "contents": [{"role": "user", "parts": [{"text": "x"}]}],
                "generationConfig": {"responseMimeType": "application/json", "responseSchema": {"type": "object"}},
            },
            "Invalid value",
        ),
    ],
)
def test_the_gemini_fake(fake_gemini: FakeGemini, body: dict[str, Any], message: str) -> None:
    resp = httpx.post(
        fake_gemini.url + "/v1beta/models/gemini-echo:generateContent", headers={"x-goog-api-key": "gm-fake"}, json=body
    )
    assert resp.status_code == 400 and message in resp.json()["error"]["message"]


ASK = {"role": "user", "parts": [{"text": "weather?"}]}
ANSWER = {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}


def step(*signatures: str | None) -> dict[str, Any]:
    """A model step of parallel calls, each with its signature (None: no signature field)."""
    call = {"functionCall": {"name": "f", "args": {}}}
    return {"role": "model", "parts": [{**call, "thoughtSignature": s} if s else call for s in signatures]}


@pytest.mark.parametrize(
    ("contents", "refused"),
    [
        ([ASK, step(SIGNATURE), ANSWER], None),
        ([ASK, step(SIGNATURE, None), ANSWER], None),  # Gemini signs only the first of parallel calls
        ([ASK, step("skip_thought_signature_validator"), ANSWER], None),  # Google's documented placeholders
        ([ASK, step("context_engineering_is_the_way_to_go"), ANSWER], None),
        ([ASK, step(None), ANSWER, {"role": "model", "parts": [{"text": "done"}]}, ASK], None),  # an older turn
        ([ASK, step(None), ANSWER], "missing a thought_signature"),
        ([ASK, step(None, SIGNATURE), ANSWER], "missing a thought_signature"),
        ([ASK, step(SIGNATURE), ANSWER, step(None), ANSWER], "missing a thought_signature"),  # every step
        ([ASK, step("Zm9yZ2Vk"), ANSWER], "Corrupted thought signature"),
    ],
)
def test_the_gemini_fake_checks_the_current_turns_signatures(
    contents: list[dict[str, Any]], refused: str | None
) -> None:
    """As Google documents for thinking models: only the current turn (from the last user text), only each
    step's first call, the model's own signature or a documented placeholder."""
    error = signature_error(contents)
    assert error is None if refused is None else refused in (error or "")


def test_the_bedrock_fake_checks_signatures(fake_bedrock: FakeBedrock) -> None:
    body = {"messages": [{"role": "user", "content": [{"text": "x"}]}]}
    unsigned = httpx.post(fake_bedrock.url + "/model/anthropic.claude-v1:0/converse", json=body)
    assert unsigned.status_code == 403
    forged = httpx.post(
        fake_bedrock.url + "/model/anthropic.claude-v1:0/converse",
        json=body,
        headers={
            "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDFAKE/20260101/us-east-1/bedrock/aws4_request, "
            "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
            "x-amz-date": "20260101T000000Z",
        },
    )
    assert forged.status_code == 403 and "signature" in forged.json()["message"]
