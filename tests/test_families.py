"""Endpoint families (issue 20): declared once, served by adapters that implement their interface.

What a user sees: a model deployed on a provider that cannot serve it is refused when the config is checked
and when the gateway starts, naming the model and the provider (it used to load, then fail each request);
what each built-in provider kind serves; and the model types the config accepts are the families' own.
"""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from inferplex.config import ModelConfig
from inferplex.families.chat import CHAT
from inferplex.families.embeddings import EMBEDDINGS
from inferplex.families.registry import FAMILIES, model_types
from inferplex.families.token_count import TOKEN_COUNT
from tests.test_config_cli import run_cli

EMBEDDING_ON_ANTHROPIC = """
providers:
  - name: claude
    kind: anthropic
    api_key: env:ANTHROPIC_API_KEY
  - name: oai
    kind: openai
    base_url: http://127.0.0.1:9/v1
    api_key: env:ANTHROPIC_API_KEY
models:
  - name: chatty
    deployments: [{provider: claude, model: claude-sonnet-4-5}]
    pricing: {input: 3, output: 15}
  - name: vectors
    type: embedding
    deployments: [{provider: oai, model: text-embedding-3-small}, {provider: claude, model: claude-sonnet-4-5}]
    pricing: {input: 0.02, output: 0}
"""


def test_the_config_model_types_are_the_families_own() -> None:
    declared = set(typing.get_args(ModelConfig.model_fields["type"].annotation))
    assert declared == model_types() == {"chat", "embedding"}


@pytest.mark.parametrize(
    "kind,serves",
    [
        ("openai", {"chat", "embedding"}),
        ("azure", {"chat", "embedding"}),
        ("local", {"chat", "embedding"}),
        ("anthropic", {"chat", "count_tokens"}),
        ("gemini", {"chat"}),
        ("bedrock", {"chat"}),
    ],
)
def test_what_each_provider_kind_serves(kind: str, serves: set[str]) -> None:
    from inferplex.provider_kinds import TABLE

    adapter_class = typing.get_type_hints(TABLE.load(kind))["return"]
    assert {f.name for f in FAMILIES if issubclass(adapter_class, f.interface)} == serves


def test_families_declare_their_units_and_billing() -> None:
    assert [f.name for f in FAMILIES] == ["chat", "embedding", "count_tokens"]
    assert CHAT.billed and EMBEDDINGS.billed and not TOKEN_COUNT.billed
    assert CHAT.required and EMBEDDINGS.required and not TOKEN_COUNT.required


def test_a_model_on_a_provider_that_cannot_serve_it_is_refused_by_config_check(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(EMBEDDING_ON_ANTHROPIC)
    out = run_cli("config", "check", str(path), env={"ANTHROPIC_API_KEY": "sk-test"})
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"{path}: invalid configuration",
        "  models[1]: model 'vectors' (type embedding) is deployed on provider 'claude', which cannot serve "
        "embedding requests",
    ]
    assert "Traceback" not in out.stderr


def test_serve_refuses_it_before_listening(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(EMBEDDING_ON_ANTHROPIC)
    out = run_cli("serve", "--config", str(path), "--port", "0", env={"ANTHROPIC_API_KEY": "sk-test"})
    assert out.returncode == 2
    assert "model 'vectors' (type embedding) is deployed on provider 'claude'" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_app_refuses_it_at_start_up_too() -> None:
    """An app built in code (not through the CLI) fails its lifespan with the same error, having started nothing."""
    import asyncio

    from inferplex.app import create_app
    from inferplex.config import ConfigError, parse_config

    text = EMBEDDING_ON_ANTHROPIC.replace("env:ANTHROPIC_API_KEY", "env:HOME")
    config = parse_config(__import__("yaml").safe_load(text))
    app = create_app(config, "sk-master-test-key-0123456789")

    async def start() -> None:
        async with app.router.lifespan_context(app):
            pass

    with pytest.raises(ConfigError, match="cannot serve embedding requests"):
        asyncio.run(start())
    assert not hasattr(app.state, "accounts")
