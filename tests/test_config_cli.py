"""The configuration file and the `inferplex` command, as a user runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inferplex import __version__


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "inferplex", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


GOOD = """
providers:
  - name: groq
    kind: openai
    base_url: https://api.groq.com/openai/v1
    api_key: env:GROQ_API_KEY
    headers: {X-Team: infra}
    timeouts: {connect: 3, read: 60}
models:
  - name: llama-3.1-8b
    deployments: [{provider: groq, model: llama-3.1-8b-instant}]
    context_window: 131072
    max_output: 8192
    capabilities: {tools: true, vision: false, json_schema: true, streaming: true}
    pricing: {input: 0.05, output: 0.08, cached_input: 0.025}
"""


def test_version() -> None:
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"inferplex {__version__}"


def test_config_check_accepts_a_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    out = run_cli("config", "check", str(path), env={"GROQ_API_KEY": "gsk-test"})
    assert out.returncode == 0, out.stderr
    assert "OK" in out.stdout and "1 providers, 1 models" in out.stdout
    assert "gsk-test" not in out.stdout + out.stderr


@pytest.mark.parametrize(
    "text,field,problem",
    [
        (GOOD.replace("api_key: env:GROQ_API_KEY", "api_key: gsk-inline-secret"), "providers[0].api_key", "inlined"),
        (GOOD.replace("env:GROQ_API_KEY", "env:NOT_SET_ANYWHERE"), "providers[0].api_key", "NOT_SET_ANYWHERE"),
        (
            GOOD.replace("provider: groq,", "provider: nowhere,"),
            "models[0].deployments[0].provider",
            "unknown provider",
        ),
        (GOOD.replace("    kind: openai", "    kind: carrier-pigeon"), "providers[0].kind", "unknown kind"),
        (GOOD.replace("context_window: 131072", "context_window: -5"), "models[0].context_window", "greater than 0"),
        (GOOD.replace("    headers:", "    colour: blue\n    headers:"), "providers[0].colour", "Extra inputs"),
        (
            GOOD.replace("    deployments: [{provider: groq, model: llama-3.1-8b-instant}]\n", ""),
            "models[0].deployments",
            "required",
        ),
        (
            GOOD + "storage: {redis_url: 'redis+cluster://:hunter2@r1:7000/0'}\n",
            "storage.redis_url",
            "a cluster has no databases",
        ),
        (GOOD + "routing: {redis_url: 'redis+sentinel://s1:26379'}\n", "routing.redis_url", "/service_name"),
        (GOOD + "storage: {redis_url: 'memcached://m:11211'}\n", "storage.redis_url", "the scheme must be"),
    ],
)
def test_config_errors_name_file_field_and_problem(tmp_path: Path, text: str, field: str, problem: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    out = run_cli("config", "check", str(path), env={"GROQ_API_KEY": "gsk-test"})
    assert out.returncode != 0
    assert str(path) in out.stderr and field in out.stderr and problem in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert "gsk-inline-secret" not in out.stderr and "hunter2" not in out.stderr


def test_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("providers: [\n")
    out = run_cli("config", "check", str(path))
    assert out.returncode != 0 and "not valid YAML" in out.stderr and str(path) in out.stderr
    out = run_cli("config", "check", str(tmp_path / "absent.yaml"))
    assert out.returncode != 0 and "cannot read" in out.stderr


def test_serve_refuses_a_bad_config(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("models: [{name: x}]\n")
    out = run_cli("serve", "--config", str(path), "--port", "0")
    assert out.returncode != 0 and "models[0].deployments" in out.stderr and str(path) in out.stderr
    out = run_cli("serve", "--port", "0", env={"INFERPLEX_CONFIG": str(path)})
    assert out.returncode != 0 and "models[0].deployments" in out.stderr


def test_the_readme_config_example_is_valid(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    start = readme.index("```yaml\nserver:") + len("```yaml\n")
    path = tmp_path / "readme.yaml"
    path.write_text(readme[start : readme.index("```", start)])
    out = run_cli("config", "check", str(path), env={"GROQ_API_KEY": "gsk-test", "INFERPLEX_MASTER_KEY": "k"})
    assert out.returncode == 0, out.stderr
