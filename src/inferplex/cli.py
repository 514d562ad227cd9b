"""The `inferplex` command: `serve`, `worker`, `config check FILE`, `--version`."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from inferplex import __version__, cli_admin
from inferplex.config import Config, ConfigError, check_pricing, load_config, parse_config
from inferplex.defaults import DEFAULT_CHAT_MODEL, DEFAULT_CONFIG


def _load(path: str | None) -> tuple[Config, str]:
    path = path or os.environ.get("INFERPLEX_CONFIG") or None
    if path:
        return load_config(path), path
    return parse_config(DEFAULT_CONFIG, "<embedded defaults>"), "<embedded defaults>"


@dataclass(frozen=True, slots=True)
class MasterKey:
    value: str
    generated: bool  # by this start: the only time the banner shows the key itself
    origin: str  # where it comes from, for the banner (never the key)
    shell: str  # how a shell reads it, for the banner's curl line


def master_key(config: Config) -> str:
    return resolve_master_key(config).value


def resolve_master_key(config: Config, source: str | None = None) -> MasterKey:
    """The configured master key, else `$INFERPLEX_MASTER_KEY`, else one generated on first start and kept
    (0600) in the data directory; with where it came from, so the banner can name that instead of the key."""
    if config.server.master_key:
        reference = _configured_reference(source)
        return MasterKey(
            config.server.master_key.get_secret_value(),
            False,
            f"server.master_key ({reference or 'config'})",
            _shell_reading(reference) or "<master key>",
        )
    env = os.environ.get("INFERPLEX_MASTER_KEY")
    if env:
        return MasterKey(env, False, "$INFERPLEX_MASTER_KEY", "$INFERPLEX_MASTER_KEY")
    path = Path(config.server.data_dir) / "master_key"
    shell = f"$(cat {shlex.quote(str(path))})"
    if path.exists():
        return MasterKey(path.read_text().strip(), False, f"stored in {path}", shell)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = "ipx-" + secrets.token_urlsafe(24)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return MasterKey(key, True, f"stored in {path}", shell)


def _configured_reference(source: str | None) -> str | None:
    """`server.master_key` as written in the config file (`env:NAME` or `file:PATH`), not as resolved."""
    if source is None or not Path(source).is_file():
        return None
    try:
        raw: Any = yaml.safe_load(Path(source).read_text())
        reference = raw["server"]["master_key"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None
    return reference if isinstance(reference, str) else None


def _shell_reading(reference: str | None) -> str | None:
    if reference is None:
        return None
    kind, _, name = reference.partition(":")
    if kind == "env" and name.isidentifier():
        return f"${name}"
    if kind == "file" and name:
        return f"$(cat {shlex.quote(name)})"
    return None


def banner(host: str, port: int, source: str, key: MasterKey, model: str) -> str:
    """What `serve` prints: where it serves, and how to call it. The master key itself only when this start
    generated it (the operator has no other way to learn it); otherwise where it is, never what it is, so
    that a key from the environment or a secret file does not end up in a terminal's or a service's log."""
    if key.generated:
        shown = f"{key.value} (generated now and {key.origin}; it is not shown again)"
    else:
        shown = f"the master key, {key.origin}" if key.origin.startswith("stored") else f"from {key.origin}"
    body = f'{{"model": "{model}", "messages": [{{"role": "user", "content": "Hello"}}]}}'
    return (
        f"Inferplex {__version__} serving on http://{host}:{port}/v1 (config: {source})\n"
        f"  key:   {shown}\n"
        f'  try:   curl http://{host}:{port}/v1/chat/completions -H "Authorization: Bearer {key.shell}" '
        f"-H 'Content-Type: application/json' -d '{body}'"
    )


def _check_adapters(config: Config, source: str) -> None:
    """Build every provider's adapter once and check it serves its models' endpoint families: a config error
    (naming the model and provider) before the server starts, rather than an error in its lifespan."""
    from inferplex.app import Resources, build_adapters
    from inferplex.families.registry import check_adapters
    from inferplex.providers.http import new_session

    async def build() -> None:
        session = new_session()
        adapters = {}
        try:
            adapters = build_adapters(config, Resources(session, config))
            check_adapters(config, adapters, source)
        finally:
            for adapter in adapters.values():
                await adapter.aclose()
            await session.close()

    asyncio.run(build())


def _check(path: str) -> int:
    config = load_config(path)
    check_pricing(config, path)
    _check_adapters(config, path)
    print(f"{path}: OK ({len(config.providers)} providers, {len(config.models)} models)")
    return 0


def _validated(path: str | None) -> tuple[Config, str]:
    """The config `serve` would run with, checked as it checks it at start (a reload checks the same)."""
    config, source = _load(path)
    check_pricing(config, source)
    _check_adapters(config, source)
    return config, source


def _serve(args: argparse.Namespace) -> int:
    from inferplex.serving import worker

    config, source = _validated(args.config)
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    key = resolve_master_key(config, source)
    workers = args.workers or config.server.workers or worker.worker_count()
    example = next((m.name for m in config.models if m.type == "chat"), DEFAULT_CHAT_MODEL)
    print(banner(host, port, source, key, example), flush=True)
    worker.configure_logging(config)
    if workers == 1:  # no supervisor: what each replica of a fleet runs (its orchestrator restarts it)
        return worker.serve(config, key.value, host, port)
    from inferplex.serving.supervisor import Plan, Supervisor

    plan = Plan(host, port, args.config or os.environ.get("INFERPLEX_CONFIG") or None, args.workers)
    return Supervisor(plan, config, _validated, lambda c, s: resolve_master_key(c, s).value).run()


def _worker(args: argparse.Namespace) -> int:
    """`inferplex worker`: the gateway's background work (batches, and the durable jobs) without its HTTP
    server: the same lifespan as `serve`, with the batch worker on whatever `batches.worker` says, until
    SIGINT or SIGTERM (docs/batches.md)."""
    import logging

    from inferplex.app import create_app

    config, source = _load(args.config)
    check_pricing(config, source)
    _check_adapters(config, source)
    config = config.model_copy(update={"batches": config.batches.model_copy(update={"worker": True})})
    app = create_app(config, resolve_master_key(config, source).value)
    logging.basicConfig(level=config.server.log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    print(f"Inferplex {__version__} worker running batches (config: {source})", flush=True)

    async def run() -> None:
        import signal

        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with app.router.lifespan_context(app):
            await stop.wait()

    asyncio.run(run())
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="inferplex", description="A self-hosted LLM inference gateway.")
    parser.add_argument("--version", action="version", version=f"inferplex {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", help="YAML config file (default: $INFERPLEX_CONFIG, else embedded defaults)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument(
        "--workers",
        type=_positive,
        help="worker processes sharing the port (default: server.workers, else one per core)",
    )
    worker = sub.add_parser("worker", help="run the batch worker without serving HTTP")
    worker.add_argument("--config", help="YAML config file (default: $INFERPLEX_CONFIG, else embedded defaults)")
    config = sub.add_parser("config", help="configuration tools")
    config_sub = config.add_subparsers(dest="config_command", required=True)
    check = config_sub.add_parser("check", help="validate a config file and exit")
    check.add_argument("file")
    cli_admin.register(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "worker":
            return _worker(args)
        if args.command in cli_admin.COMMANDS:
            return cli_admin.run(args, _load(args.config)[0])
        return _check(args.file)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
