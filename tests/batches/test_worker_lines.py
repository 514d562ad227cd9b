"""The batch line format as pure functions (batches/lines.py), one row per case: an input line checked, an
input file's errors with their line numbers, and the output and error files in OpenAI's line format."""

from __future__ import annotations

import json
from typing import Any

import pytest

from inferplex.batches.lines import files_of, line_error, output_line, parse_file, request_line_id
from inferplex.batches.model import LineInput, LineResult

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def item(**over: Any) -> dict[str, Any]:
    return {"custom_id": "a", "method": "POST", "url": CHAT, "body": BODY, **over}


@pytest.mark.parametrize(
    ("line", "endpoint", "code"),
    [
        (item(), CHAT, None),
        ([], CHAT, "invalid_request"),
        (item(custom_id=""), CHAT, "missing_custom_id"),
        (item(custom_id=7), CHAT, "missing_custom_id"),
        (item(custom_id="x" * 513), CHAT, "missing_custom_id"),
        (item(custom_id="seen"), CHAT, "duplicate_custom_id"),
        (item(method="GET"), CHAT, "invalid_method"),
        (item(url="/v1/embeddings"), CHAT, "invalid_url"),
        (item(body="text"), CHAT, "invalid_body"),
        (item(body={**BODY, "stream": True}), CHAT, "invalid_body"),
        (item(body={"messages": []}), CHAT, "invalid_body"),
        (item(url="/v1/embeddings", body={"model": "e", "input": "x"}), "/v1/embeddings", None),
        (item(url="/v1/embeddings", body={"model": "e"}), "/v1/embeddings", "invalid_body"),
        (item(url="/v1/responses", body={"model": "m", "input": "x"}), "/v1/responses", None),
        (
            item(url="/v1/responses", body={"model": "m", "input": "x", "background": True}),
            "/v1/responses",
            "invalid_body",
        ),
    ],
)
def test_an_input_line_is_checked(line: Any, endpoint: str, code: str | None) -> None:
    found = line_error(line, endpoint, {"seen"})
    assert (found[0] if found else None) == code


def test_an_input_file_lists_each_bad_line_and_skips_blank_ones() -> None:
    lines = [
        json.dumps(item(custom_id="a")),
        "",
        "not json",
        json.dumps(item(custom_id="a")),
        json.dumps(item(custom_id="b")),
    ]
    found, errors = parse_file("\n".join(lines).encode(), CHAT, 10)
    assert [x.custom_id for x in found] == ["a", "b"]
    assert [(e["code"], e["line"]) for e in errors] == [("invalid_json_line", 3), ("duplicate_custom_id", 4)]


@pytest.mark.parametrize(
    ("data", "max_lines", "codes"),
    [
        (b"", 10, ["empty_file"]),
        (b"\xff\xfe", 10, ["invalid_file"]),
        ((json.dumps(item(custom_id="a")) + "\n" + json.dumps(item(custom_id="b"))).encode(), 1, ["too_many_lines"]),
    ],
)
def test_an_input_file_that_cannot_be_a_batch(data: bytes, max_lines: int, codes: list[str]) -> None:
    assert [e["code"] for e in parse_file(data, CHAT, max_lines)[1]] == codes


def test_lines_handed_over_are_parsed_the_same() -> None:
    found, _ = parse_file(json.dumps(item()).encode(), CHAT, 10)
    assert found == [LineInput("a", BODY)]


RESULTS = [
    LineResult(0, "ok", "succeeded", 200, {"object": "chat.completion"}, None, "breq_1", 12),
    LineResult(1, "bad", "errored", 400, {"error": {"message": "no"}}, None, "breq_2"),
    LineResult(2, "late", "expired", 0, None, {"code": "batch_expired", "message": "late"}),
]


def test_the_output_and_error_files_in_openai_line_format() -> None:
    out, err = files_of("batch_x", RESULTS)
    assert [json.loads(x) for x in out.splitlines()] == [
        {"id": request_line_id("batch_x", 0), "custom_id": "ok", "error": None,
         "response": {"status_code": 200, "request_id": "breq_1", "body": {"object": "chat.completion"}}},
    ]  # fmt: skip
    assert [json.loads(x) for x in err.splitlines()] == [output_line("batch_x", r) for r in RESULTS[1:]]
    assert output_line("batch_x", RESULTS[2]) == {
        "id": request_line_id("batch_x", 2), "custom_id": "late", "response": None,
        "error": {"code": "batch_expired", "message": "late"},
    }  # fmt: skip
    assert request_line_id("batch_x", 0).startswith("batch_req_") and request_line_id("batch_x", 0) != (
        request_line_id("batch_y", 0)
    )
