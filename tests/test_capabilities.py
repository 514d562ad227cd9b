"""The capability decisions (one table per rule) and the generated provider matrix in docs/providers.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from inferplex import capabilities as caps
from inferplex.canonical import ChatRequest
from inferplex.capabilities import D, E, N, ProviderCapabilities, R
from inferplex.config import Capabilities
from inferplex.emulation import add_usage, json_tool_chunk, json_tool_completion
from inferplex.errors import InvalidRequest
from inferplex.gateway_request import parse_request

ROOT = Path(__file__).resolve().parents[1]
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
IMAGE = {
    "role": "user",
    "content": [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}],
}
AUDIO = {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}]}
SCHEMA = {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}}}
LIMITED = ProviderCapabilities(
    n=E, json_schema=E, json_object=E, logprobs=D, seed=D, parallel_tool_calls=D, audio_input=R, vision=N, tools=N
)


def decide(
    request: dict[str, Any], provider: ProviderCapabilities = LIMITED, stream: bool = False, **model: Any
) -> caps.Plan:
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **request}
    return caps.plan(
        parse_request(ChatRequest, request),
        provider,
        Capabilities(**{"vision": True, **model}),
        provider_name="p",
        model_name="m",
        stream=stream,
    )


PLANS: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ("nothing to do", {}, {}, {"dropped": (), "fan_out": 1, "json_tool": None, "buffered_stream": False}),
    (
        "logprobs dropped with top_logprobs",
        {"logprobs": True, "top_logprobs": 2},
        {},
        {"dropped": ("logprobs", "top_logprobs")},
    ),
    ("seed dropped", {"seed": 1}, {}, {"dropped": ("seed",)}),
    ("n emulated", {"n": 3}, {}, {"fan_out": 3, "dropped": ()}),
    ("n = 1 is nothing", {"n": 1}, {}, {"fan_out": 1}),
    ("json_schema by tool", {"response_format": SCHEMA}, {}, {"json_tool": caps.JsonTool("out", {"type": "object"})}),
    (
        "json_object by tool",
        {"response_format": {"type": "json_object"}},
        {},
        {"json_tool": caps.JsonTool("json_answer", caps.ANY_OBJECT_SCHEMA, "Answer with one JSON object.")},
    ),
    (
        "model without json_schema drops it",
        {"response_format": SCHEMA},
        {"json_schema": False},
        {"dropped": ("response_format",), "json_tool": None},
    ),
    (
        "parallel_tool_calls false dropped",
        {"tools": [TOOL], "parallel_tool_calls": False},
        {},
        {"dropped": ("parallel_tool_calls",)},
    ),
    (
        "model without tools drops tools",
        {"tools": [TOOL], "tool_choice": "auto"},
        {"tools": False},
        {"dropped": ("tools",)},
    ),
    ("model without vision drops images", {"messages": [IMAGE]}, {"vision": False}, {"dropped": ("image_url",)}),
    ("streaming emulated", {}, {"streaming": False}, {"buffered_stream": True}),
]


@pytest.mark.parametrize(("name", "request_", "model", "expected"), PLANS, ids=[p[0] for p in PLANS])
def test_plan(name: str, request_: dict[str, Any], model: dict[str, Any], expected: dict[str, Any]) -> None:
    decided = decide(request_, stream=True, **model)
    for key, value in expected.items():
        assert getattr(decided, key) == value, key


def test_dropped_fields_are_removed_from_the_request() -> None:
    decided = decide({"seed": 1, "n": 2, "tools": [TOOL], "messages": [IMAGE]}, vision=False, tools=False)
    r = decided.request
    assert r.seed is None and r.n is None and r.tools is None
    assert [p.type for p in r.messages[0].content or ()] == ["text"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("request_", "param"),
    [
        ({"seed": 1, "drop_params": False}, "seed"),
        ({"messages": [IMAGE], "drop_params": False}, "image_url"),
        ({"messages": [AUDIO]}, "input_audio"),  # refused even with drop_params true
        ({"drop_params": "yes"}, "drop_params"),
    ],
)
def test_refusals_name_the_parameter(request_: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        decide(request_, vision=param != "image_url")
    assert err.value.param == param and err.value.status == 400


def test_json_tool_results_become_content() -> None:
    completion = {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {"content": None, "tool_calls": [{"function": {"name": "out", "arguments": '{"a":1}'}}]},
            }
        ]
    }
    assert json_tool_completion(completion)["choices"][0] == {
        "finish_reason": "stop",
        "message": {"content": '{"a":1}'},
    }
    chunk = {
        "choices": [{"finish_reason": None, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a'}}]}}]
    }
    assert json_tool_chunk(chunk)["choices"][0]["delta"] == {"content": '{"a'}


def test_usage_sums_nested_details() -> None:
    a = {"prompt_tokens": 1, "prompt_tokens_details": {"cached_tokens": 2}}
    b = {"prompt_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}, "extra": "x"}
    assert add_usage(add_usage(None, a), b) == {
        "prompt_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 6},
        "extra": "x",
    }


def test_the_committed_matrix_is_the_generated_one() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "inferplex.providers.matrix", "--markdown"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert (ROOT / "docs" / "providers.md").read_text() == out.stdout
    assert "| json_schema | native | native | native | native | emulated |" in out.stdout
