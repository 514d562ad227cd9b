"""The local provider's pure parts and its start-up checks, without generating anything."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from inferplex.canonical import ChatRequest
from inferplex.config import ConfigError, ProviderConfig, parse_config
from inferplex.defaults import DEFAULT_CONFIG
from inferplex.errors import InvalidRequest
from inferplex.providers import local
from inferplex.providers.local_chat import parse_tool_call, plan_chat
from inferplex.providers.local_llama import ChatSpec, _partial_stop, check_gguf


def _create(options: dict[str, Any], deployments: list[str] | None = None) -> local.LocalProvider:
    config = parse_config(
        {
            "providers": [{"name": "local", "kind": "local", "options": options}],
            "models": [
                {"name": f"m{i}", "deployments": [{"provider": "local", "model": d}]}
                for i, d in enumerate(deployments or [])
            ],
        }
    )

    class Resources:
        pass

    resources = Resources()
    resources.config = config  # type: ignore[attr-defined]
    return local.create(config.providers[0], resources)


def test_default_config_resolves_the_bundled_models() -> None:
    config = parse_config(DEFAULT_CONFIG)
    provider = _create({}, [d.model for m in config.models for d in m.deployments])
    assert set(provider._chat) == {"smollm2-135m-instruct"}
    assert set(provider._embed_specs) == {"all-minilm-l6-v2"}
    assert provider._chat["smollm2-135m-instruct"].spec.path.name.endswith(".gguf")


def test_missing_model_file_refuses_to_start(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ConfigError, match=re.escape(str(missing))):
        _create({"models": {"mine": {"path": str(missing)}}})
    with pytest.raises(ConfigError, match=r"nope\.gguf"):
        _create({}, [str(missing)])


def test_a_file_that_is_not_gguf_refuses_to_start(tmp_path: Path) -> None:
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 not a model")
    assert check_gguf(fake) is not None
    with pytest.raises(ConfigError, match="not a GGUF file"):
        _create({"models": {"mine": {"path": str(fake)}}})


def test_bad_options_and_unknown_models_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown local model"):
        _create({}, ["gpt-9"])
    with pytest.raises(ConfigError, match="n_ctx"):
        _create({"models": {"smollm2-135m-instruct": {"n_ctx": "big"}}})
    with pytest.raises(ConfigError, match="unknown option"):
        _create({"models": {"smollm2-135m-instruct": {"gpu_layers": 3}}})
    with pytest.raises(ConfigError, match="lacks"):
        _create({"models": {"enc": {"path": str(tmp_path)}}})
    provider = _create({"models": {"smollm2-135m-instruct": {"n_ctx": 2048, "parallel": 2}}})
    spec: ChatSpec = provider._chat["smollm2-135m-instruct"].spec
    assert (spec.n_ctx, spec.parallel) == (2048, 2)


def _request(**kw: Any) -> ChatRequest:
    return ChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw})


def test_plan_for_tools_and_json() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    plan = plan_chat(_request(tools=[tool], tool_choice="required"), None, None)
    assert plan.mode == "tool_required" and plan.grammar and plan.messages[0]["role"] == "system"
    auto = plan_chat(_request(tools=[tool]), None, None)
    assert auto.mode == "tool_auto" and auto.grammar and auto.grammar.startswith("root ::= tool-call | prose")
    assert plan_chat(_request(tools=[tool], tool_choice="none"), None, None).mode == "text"
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    js = plan_chat(_request(response_format=fmt), None, None)
    assert js.mode == "json" and js.grammar and "\\x00-\\x1F" in js.grammar
    with pytest.raises(InvalidRequest) as err:
        plan_chat(_request(tools=[tool], tool_choice={"type": "function", "function": {"name": "g"}}), None, None)
    assert err.value.param == "tool_choice"
    with pytest.raises(InvalidRequest) as err:
        plan_chat(_request(max_tokens=5000), 2048, None)
    assert err.value.param == "max_tokens"


def test_images_are_refused() -> None:
    content = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    req = ChatRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": content}]})
    with pytest.raises(InvalidRequest) as err:
        plan_chat(req, None, None)
    assert err.value.param == "messages"


def test_partial_stop_holds_back_only_possible_prefixes() -> None:
    assert _partial_stop("hello wor", ["world"]) == 3
    assert _partial_stop("hello", ["world"]) == 0
    assert _partial_stop("abc", []) == 0
    assert _partial_stop("x END", ["END!", "ZZ"]) == 3


def test_parse_tool_call() -> None:
    call = parse_tool_call('{"name": "f", "arguments": {"a": 1}}', ["f"], finished=True)
    assert call is not None and call["function"]["name"] == "f"
    assert json.loads(call["function"]["arguments"]) == {"a": 1}
    assert parse_tool_call("plain prose", ["f"], finished=True) is None
    cut = parse_tool_call('{"name": "f", "arguments": {"a": ', ["f"], finished=False)
    assert cut is not None and cut["function"] == {"name": "f", "arguments": '{"a":'}


def test_provider_config_accepts_options() -> None:
    cfg = ProviderConfig(name="local", kind="local", options={"models": {"x": {"path": "/tmp/x.gguf"}}})
    assert cfg.options["models"]["x"]["path"] == "/tmp/x.gguf"


def test_any_gguf_by_path_or_as_the_deployment_id() -> None:
    bundled = local._bundled_path("smollm2-135m-instruct", "local")
    provider = _create({"models": {"mine": {"path": str(bundled), "n_ctx": 512}}}, [str(bundled)])
    assert provider._chat["mine"].spec.path == bundled and provider._chat["mine"].spec.n_ctx == 512
    assert provider._chat[str(bundled)].spec.n_ctx is None  # the model's own window, at most 8192
