"""Install the peer gateways bench/peers.py compares Inferplex with, each in its own environment.

- LiteLLM's proxy, a pinned version, from PyPI into its own virtual environment (`bench/.peers/litellm/`):
  its dependencies (FastAPI, an older pydantic or httpx) must not touch the gateway's venv.
- Portkey's gateway, a pinned version, from npm into `bench/.peers/portkey/` (Node.js 18+ runs its built
  server, `build/start-server.js`).

`bench/.peers/` is gitignored. Each install is skipped when a stamp file says the pinned version is already
there, so running it again (or bench/peers.py, which calls it) costs nothing. Only the ordinary clients are
used (pip, npm), nothing else is downloaded.

    python bench/peers_install.py            # both
    python bench/peers_install.py litellm    # one
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

PEERS = Path(__file__).resolve().parent / ".peers"
LITELLM = "1.106.12"  # the version issue 25's table measured (1.106)
PORTKEY = "1.15.2"  # @portkey-ai/gateway; issue 25's table: 1.15
# Portkey asks for @hono/node-server ^1.3.3, and npm picks the newest 1.x (1.19.19 here), with which every
# stream fails ("TypeError: immutable" when Portkey adds its headers to the upstream's response:
# Portkey-AI/gateway issue 1389). 1.14.2, which that issue names as the last good one, fails the same way
# with Node 20 here; 1.11.0 streams (checked by hand: buffered and streamed calls both answer).
HONO_NODE_SERVER = "1.11.0"


def litellm_bin() -> Path:
    """The `litellm` proxy command of the installed environment."""
    return PEERS / "litellm" / "bin" / "litellm"


def portkey_server() -> Path:
    """Portkey's built Node.js server script."""
    return PEERS / "portkey" / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"


def _stamped(name: str, version: str) -> bool:
    """Whether `name` is installed at `version` (the stamp is written last, so a broken install has none)."""
    stamp = PEERS / f"{name}.version"
    return stamp.exists() and stamp.read_text().strip() == version


def _stamp(name: str, version: str) -> None:
    (PEERS / f"{name}.version").write_text(version + "\n")


def install_litellm() -> Path:
    """`litellm[proxy]` pinned, in its own venv made by the system's Python 3 (the one running this)."""
    if _stamped("litellm", LITELLM) and litellm_bin().exists():
        return litellm_bin()
    env = PEERS / "litellm"
    PEERS.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(env)], check=True)
    pip = [str(env / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "install", "-q"]
    subprocess.run([*pip, f"litellm[proxy]=={LITELLM}"], check=True)
    _stamp("litellm", LITELLM)
    return litellm_bin()


def install_portkey() -> Path:
    """`@portkey-ai/gateway` pinned, with npm (no global install, no postinstall downloads of its own)."""
    if _stamped("portkey", f"{PORTKEY} hono-node-server {HONO_NODE_SERVER}") and portkey_server().exists():
        return portkey_server()
    if shutil.which("npm") is None or shutil.which("node") is None:
        raise SystemExit("node and npm are needed for Portkey's gateway: apt-get install -y nodejs npm")
    where = PEERS / "portkey"
    where.mkdir(parents=True, exist_ok=True)
    package = {"name": "inferplex-bench-peers", "private": True, "overrides": {"@hono/node-server": HONO_NODE_SERVER}}
    (where / "package.json").write_text(json.dumps(package, indent=2) + "\n")
    cmd = ["npm", "install", "--no-audit", "--no-fund", "--omit=dev", "--save-exact", f"@portkey-ai/gateway@{PORTKEY}"]
    subprocess.run(cmd, cwd=where, check=True)
    if not portkey_server().exists():
        raise SystemExit(f"Portkey installed but {portkey_server()} is missing: its layout changed")
    _stamp("portkey", f"{PORTKEY} hono-node-server {HONO_NODE_SERVER}")
    return portkey_server()


def main(argv: list[str]) -> int:
    wanted = set(argv) or {"litellm", "portkey"}
    if "litellm" in wanted:
        print(f"LiteLLM {LITELLM}: {install_litellm()}", flush=True)
    if "portkey" in wanted:
        print(f"Portkey {PORTKEY}: {install_portkey()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
