"""A batch's lines in and out, as pure functions: the input file checked line by line, the output and error
files in OpenAI's line format.

Input (OpenAI's batch input file): one JSON object per line, `{"custom_id", "method": "POST", "url", "body"}`,
`url` the batch's endpoint, `custom_id` unique in the file. Every line is checked when the batch is created,
its body too (as its endpoint's route would parse it), so a bad line fails the batch at once (`failed`, with
`errors`, as OpenAI does) instead of costing a run.

Output: `{"id": "batch_req_...", "custom_id", "response": {"status_code", "request_id", "body"}, "error": null}`
for every line that was run (the output file takes the 200s, the error file the rest, with the endpoint's
error object as the body), and `{"id", "custom_id", "response": null, "error": {"code", "message"}}` for a
line never run (the batch was cancelled or expired first).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from typing import Any

from inferplex.batches.model import ENDPOINTS, LineInput, LineResult
from inferplex.canonical import ChatRequest, EmbeddingRequest
from inferplex.errors import GatewayError
from inferplex.gateway_request import parse_request
from inferplex.responses_api.wire import ResponsesRequest

MAX_ERRORS = 100  # errors listed for a failed input file (OpenAI lists the first ones too)
MAX_CUSTOM_ID = 512


def _chat(body: dict[str, Any]) -> None:
    parse_request(ChatRequest, body)


def _embeddings(body: dict[str, Any]) -> None:
    parse_request(EmbeddingRequest, body)


def _responses(body: dict[str, Any]) -> None:
    if body.get("background"):
        raise ValueError("'background' is not supported in a batch.")
    parse_request(ResponsesRequest, body)


# How each endpoint's body is checked at creation (a ValueError or GatewayError: the line is invalid).
CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "/v1/chat/completions": _chat,
    "/v1/embeddings": _embeddings,
    "/v1/responses": _responses,
}


def body_error(endpoint: str, body: Any) -> str | None:
    """Why `body` cannot be run on `endpoint`, or None."""
    if not isinstance(body, dict):
        return "'body' must be a JSON object."
    if body.get("stream"):
        return "Streaming is not supported in a batch: remove 'stream'."
    try:
        CHECKS[endpoint](body)
    except GatewayError as err:
        return err.message
    except ValueError as err:
        return str(err)
    return None


def _error(code: str, message: str, line: int | None, param: str | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "param": param, "line": line}


def parse_file(data: bytes, endpoint: str, max_lines: int) -> tuple[list[LineInput], list[dict[str, Any]]]:
    """The input file's lines, and what is wrong with them (OpenAI's `errors.data` items, `line` 1-based).
    Blank lines are skipped; any error fails the whole batch."""
    lines: list[LineInput] = []
    errors: list[dict[str, Any]] = []
    seen: set[str] = set()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return [], [_error("invalid_file", "The input file is not UTF-8 text.", None)]
    number = 0
    for number, raw in enumerate(text.splitlines(), 1):
        if len(errors) >= MAX_ERRORS:
            break
        if not raw.strip():
            continue
        if len(lines) >= max_lines:
            errors.append(_error("too_many_lines", f"The input file has more than {max_lines} requests.", number))
            break
        try:
            item = json.loads(raw)
        except ValueError:
            errors.append(_error("invalid_json_line", "This line is not valid JSON.", number))
            continue
        problem = line_error(item, endpoint, seen)
        if problem is not None:
            errors.append(_error(problem[0], problem[1], number, problem[2]))
            continue
        seen.add(item["custom_id"])
        lines.append(LineInput(item["custom_id"], item["body"]))
    if not lines and not errors:
        errors.append(_error("empty_file", "The input file has no requests.", None))
    return lines, errors


def line_error(item: Any, endpoint: str, seen: set[str]) -> tuple[str, str, str | None] | None:
    """(code, message, param) for an input line that does not hold, else None."""
    if not isinstance(item, dict):
        return "invalid_request", "Each line must be a JSON object.", None
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID:
        return "missing_custom_id", f"'custom_id' must be a string of 1 to {MAX_CUSTOM_ID} characters.", "custom_id"
    if custom_id in seen:
        return "duplicate_custom_id", f"The custom_id '{custom_id}' is used by an earlier line.", "custom_id"
    if item.get("method") != "POST":
        return "invalid_method", "'method' must be POST.", "method"
    if item.get("url") != endpoint:
        return "invalid_url", f"'url' must be the batch's endpoint, {endpoint}.", "url"
    problem = body_error(endpoint, item.get("body"))
    if problem is not None:
        return "invalid_body", problem, "body"
    return None


def check_lines(lines: Iterable[LineInput], endpoint: str) -> list[tuple[int, str]]:
    """(index, message) for each line handed over directly (Anthropic's requests) that does not hold."""
    seen: set[str] = set()
    found: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        item = {"custom_id": line.custom_id, "method": "POST", "url": endpoint, "body": line.body}
        problem = line_error(item, endpoint, seen)
        if problem is not None:
            found.append((i, problem[1]))
        seen.add(line.custom_id)
    return found


def supported(endpoint: str) -> bool:
    """OpenAI's batch endpoints, and any another module registered (`runners.register`)."""
    return endpoint in ENDPOINTS or endpoint in CHECKS


def request_line_id(batch_id: str, line_no: int) -> str:
    """The output line's `id`, the same however often the batch's files are written."""
    digest = hashlib.blake2b(f"{batch_id}:{line_no}".encode(), digest_size=16).hexdigest()
    return "batch_req_" + digest


def output_line(batch_id: str, result: LineResult) -> dict[str, Any]:
    """One line of the output file (a succeeded line) or of the error file (any other)."""
    line_id = request_line_id(batch_id, result.line_no)
    if result.error is not None:
        return {"id": line_id, "custom_id": result.custom_id, "response": None, "error": result.error}
    response = {"status_code": result.status_code, "request_id": result.request_id, "body": result.body}
    return {"id": line_id, "custom_id": result.custom_id, "response": response, "error": None}


def files_of(batch_id: str, results: Iterable[LineResult]) -> tuple[bytes, bytes]:
    """The output file and the error file, as JSONL (either may be empty)."""
    out: list[bytes] = []
    err: list[bytes] = []
    for result in results:
        encoded = json.dumps(output_line(batch_id, result), separators=(",", ":")).encode() + b"\n"
        (out if result.outcome == "succeeded" else err).append(encoded)
    return b"".join(out), b"".join(err)
