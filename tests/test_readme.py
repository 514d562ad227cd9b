"""The README's examples run as written after the one command that precedes them (`make run`).

Two checks. First, what the Python example imports is installed by `make run` (the Makefile's run stamp
installs the project with some extras; the example's third-party imports must be among the project's
dependencies or those extras). Second, the examples' own text is run: the curl and Python blocks, against
a gateway serving the README's model name (`smollm2-135m`, here on a fake upstream rather than the bundled
model, which is slow to load), from a directory holding `.inferplex/master_key` as `make run` leaves it.
Only the address is substituted (the test gateway listens on a free port, not 8080).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
ADDRESS = "http://127.0.0.1:8080"
# distribution names where they differ from the module imported
DISTRIBUTIONS = {"yaml": "pyyaml"}


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def _example(language: str, needle: str) -> str:
    found = [b for b in _blocks(language) if needle in b]
    assert len(found) == 1, f"expected one {language} block with {needle!r} in the README"
    return found[0]


def _requirement_name(spec: str) -> str:
    return re.split(r"[\s\[<>=!~;]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _installed_by_make_run() -> set[str]:
    """The distributions `make run` installs: the project's dependencies plus the extras of its run stamp."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^\$\(STAMP_RUN\):.*?\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert recipe is not None, "the Makefile has no $(STAMP_RUN) recipe"
    extras = {e.strip() for group in re.findall(r"-e '\.\[([^\]]*)\]'", recipe.group(1)) for e in group.split(",")}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in extras:
        specs += project["optional-dependencies"][extra]
    return {_requirement_name(s) for s in specs}


def test_the_command_before_the_examples_is_make_run() -> None:
    before = README.split("```python", 1)[0]
    assert "make run" in _blocks("sh")[0] and "once `make run` says it is serving" in before


def test_make_run_installs_what_the_python_example_imports() -> None:
    tree = ast.parse(_example("python", "OpenAI("))
    modules = {
        alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
    }
    modules |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    third_party = {DISTRIBUTIONS.get(m, m) for m in modules - sys.stdlib_module_names}
    assert third_party, "the example imports nothing from outside the standard library?"
    missing = third_party - _installed_by_make_run()
    assert not missing, f"`make run` does not install {sorted(missing)}, which the README's Python example imports"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayServer, Path]]:
    """A gateway serving the README's model, and a working directory laid out as `make run` leaves it."""
    fake = FakeOpenAI("sk-readme").start()
    mp = pytest.MonkeyPatch()
    mp.setenv("README_UPSTREAM_KEY", "sk-readme")
    config = {
        "providers": [
            {"name": "fake", "kind": "openai", "base_url": fake.base_url, "api_key": "env:README_UPSTREAM_KEY"}
        ],
        "models": [{"name": "smollm2-135m", "deployments": [{"provider": "fake", "model": "gpt-echo"}]}],
    }
    cwd = tmp_path_factory.mktemp("readme")
    try:
        with GatewayServer(config) as server:
            (cwd / ".inferplex").mkdir()
            (cwd / ".inferplex" / "master_key").write_text(server.master_key + "\n")
            yield server, cwd
    finally:
        mp.undo()
        fake.stop()


def _run(args: list[str], code: str, served: tuple[GatewayServer, Path]) -> str:
    server, cwd = served
    assert ADDRESS in code, f"the example no longer uses {ADDRESS}"
    text = code.replace(ADDRESS, server.url)
    done = subprocess.run([*args, text], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_curl_example_runs(served: tuple[GatewayServer, Path]) -> None:
    out = _run(["bash", "-ec"], _example("sh", "curl "), served)
    answer = json.loads(out)
    assert answer["choices"][0]["message"]["content"] == "echo: Say hello in French."


def test_the_python_example_runs(served: tuple[GatewayServer, Path]) -> None:
    out = _run([sys.executable, "-c"], _example("python", "OpenAI("), served)
    assert out.startswith("echo: Say hello in French. {") and "total_ms" in out
