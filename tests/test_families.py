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
from inferplex.families.registry import FAMILIES, model_types
from tests.test_config_cli import run_cli

AUDIO = ("speech", "transcription", "translation")  # families/speech.py, families/transcription.py

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
    assert declared == model_types() == {"chat", "embedding", "image", "speech", "transcription", "video"}


@pytest.mark.parametrize(
    "kind,serves",
    [
        ("openai", {"chat", "embedding", "image", "image_edit", "image_variation", *AUDIO, "video"}),
        ("azure", {"chat", "embedding", "image", "image_edit", *AUDIO}),
        ("local", {"chat", "embedding", "speech", "transcription"}),  # the bundled audio models: no translation
        ("anthropic", {"chat", "count_tokens"}),
        ("gemini", {"chat", "image", "image_edit", *AUDIO, "video"}),
        ("bedrock", {"chat", "image", "image_variation", "video"}),
        ("replicate", {"video"}),
    ],
)
def test_what_each_provider_kind_serves(kind: str, serves: set[str]) -> None:
    from inferplex.provider_kinds import TABLE

    adapter_class = typing.get_type_hints(TABLE.load(kind))["return"]
    assert {f.name for f in FAMILIES if issubclass(adapter_class, f.interface)} == serves


def test_families_declare_their_units_and_billing() -> None:
    units = {f.name: (f.unit.value, f.required, f.billed, f.meter is not None) for f in FAMILIES}
    assert units == {
        "chat": ("tokens", True, True, False),
        "embedding": ("tokens", True, True, False),
        "count_tokens": ("tokens", False, False, False),
        "speech": ("characters", True, True, True),
        "transcription": ("seconds", True, True, True),
        "translation": ("seconds", False, True, True),  # a transcription model need not translate
        "video": ("seconds", True, True, True),
        "image": ("images", True, True, True),
        "image_edit": ("images", False, True, True),
        "image_variation": ("images", False, True, True),
    }


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


def test_the_video_family_is_metered_per_second_and_served_by_openai() -> None:
    from inferplex.accounts.pricing import Media
    from inferplex.families.videos import VIDEOS, JobStatus, VideoRequest
    from inferplex.provider_kinds import TABLE

    assert VIDEOS in FAMILIES and VIDEOS.model_type == "video" and VIDEOS.billed and VIDEOS.required
    assert VIDEOS.meter is not None
    body = VideoRequest(prompt="p", seconds="8", size="1792x1024")
    model = ModelConfig.model_validate({"name": "v", "type": "video", "deployments": [{"provider": "p", "model": "m"}]})
    assert VIDEOS.meter.worst(body, model)[1] == Media(video_seconds=8, resolution="1792x1024")
    reported = JobStatus("completed", 100, seconds=4, size="1280x720")
    assert VIDEOS.meter.used(body, reported)[1] == Media(video_seconds=4, resolution="1280x720")
    assert issubclass(typing.get_type_hints(TABLE.load("openai"))["return"], VIDEOS.interface)
