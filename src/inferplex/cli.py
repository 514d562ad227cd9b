"""The `inferplex` command: `serve`, `config check FILE`, `--version`."""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import secrets
import sys
from pathlib import Path

from inferplex import __version__, cli_admin
from inferplex.config import Config, ConfigError, check_pricing, load_config, parse_config
from inferplex.defaults import DEFAULT_CHAT_MODEL, DEFAULT_CONFIG


def _load(path: str | None) -> tuple[Config, str]:
    path = path or os.environ.get("INFERPLEX_CONFIG") or None
    if path:
        return load_config(path), path
    return parse_config(DEFAULT_CONFIG, "<embedded defaults>"), "<embedded defaults>"


def master_key(config: Config) -> str:
    """The configured master key, or one generated on first start and kept in the data directory."""
    if config.server.master_key:
        return config.server.master_key.get_secret_value()
    env = os.environ.get("INFERPLEX_MASTER_KEY")
    if env:
        return env
    path = Path(config.server.data_dir) / "master_key"
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    key = "ipx-" + secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key


def _check(path: str) -> int:
    from inferplex.app import Resources, build_adapters
    from inferplex.providers.http import new_session

    config = load_config(path)
    check_pricing(config, path)

    async def build() -> None:
        session = new_session()
        try:
            for adapter in build_adapters(config, Resources(session, config)).values():
                await adapter.aclose()
        finally:
            await session.close()

    asyncio.run(build())
    print(f"{path}: OK ({len(config.providers)} providers, {len(config.models)} models)")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from inferplex.app import create_app
    from inferplex.http_server import GatewayHTTPProtocol

    config, source = _load(args.config)
    check_pricing(config, source)
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    key = master_key(config)
    app = create_app(config, key)
    example = next((m.name for m in config.models if m.type == "chat"), DEFAULT_CHAT_MODEL)
    print(
        f"Inferplex {__version__} serving on http://{host}:{port}/v1 (config: {source})\n"
        f"  key:   {key}\n"
        f"  try:   curl http://{host}:{port}/v1/chat/completions -H 'Authorization: Bearer {key}' "
        f"-H 'Content-Type: application/json' "
        f'-d \'{{"model": "{example}", "messages": [{{"role": "user", "content": "Hello"}}]}}\'',
        flush=True,
    )
    # Requests leave almost no reference cycles, but the default thresholds run full collections that
    # pause the loop for tens of ms under load (docs/benchmarks.md): freeze what start-up allocated and
    # collect the young generation less often. A young collection scans what is still alive, not what was
    # allocated, so its cost per request falls with its frequency: 200,000 saved 2% of CPU over 50,000.
    gc.collect()
    gc.freeze()
    gc.set_threshold(200_000, 50, 50)
    uvicorn.run(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http=GatewayHTTPProtocol,
        log_level=config.server.log_level,
        access_log=False,
        server_header=False,
        date_header=False,
        proxy_headers=False,  # X-Forwarded-For is trusted only from configured proxies (accounts/auth)
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferplex", description="A self-hosted LLM inference gateway.")
    parser.add_argument("--version", action="version", version=f"inferplex {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", help="YAML config file (default: $INFERPLEX_CONFIG, else embedded defaults)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    config = sub.add_parser("config", help="configuration tools")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    check = config_sub.add_parser("check", help="validate a config file and exit")
    check.add_argument("file")
    cli_admin.register(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command in cli_admin.COMMANDS:
            return cli_admin.run(args, _load(args.config)[0])
        return _check(args.file)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
