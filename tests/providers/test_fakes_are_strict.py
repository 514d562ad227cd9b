"""The fakes reject what the real providers reject, so a passing adapter test means a valid request."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.bedrock_upstream import FakeBedrock
from tests.fakes.gemini_upstream import FakeGemini

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
