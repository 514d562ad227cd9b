"""`inferplex keys|credits|usage|db ...`: administration from the shell, straight to the database.

The CLI uses the same configuration file as the server (so the same database), the same operations as
the admin API (`admin/operations.py`) and the same validation (`admin/models.py`): what the API refuses with
a 400 the CLI refuses with the same message on stderr and exit status 2 (1 for something not found or a
database that cannot be reached), never a traceback. Credits on the command line are in USD
(`--credits 20`, at most 6 decimal places); the API and the database count micro-USD.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from pydantic import ValidationError

from inferplex.accounts.wiring import database_url
from inferplex.admin import operations as ops
from inferplex.admin.models import CreditChange, KeyCreate, invalid
from inferplex.config import Config
from inferplex.errors import GatewayError
from inferplex.store.backend import Database, unreachable
from inferplex.store.engine import open_storage
from inferplex.store.keys import KeyStore
from inferplex.store.ledger import Ledger
from inferplex.store.usage import GROUPS, UsageFilter, UsageStore

COMMANDS = ("keys", "credits", "usage", "db")


def usd_to_micros(text: str) -> int:
    """USD as written (`20`, `0.5`) to micro-USD, exactly: a fraction of a micro-USD is refused, not dropped."""
    try:
        micros = Decimal(text) * 1_000_000
    except InvalidOperation:
        micros = Decimal("NaN")
    if not micros.is_finite():
        raise argparse.ArgumentTypeError(f"{text!r} is not an amount in USD")
    if micros != micros.to_integral_value():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of micro-USD (6 decimal places at most)")
    return int(micros)


def register(sub: Any) -> None:
    def parser(parent: Any, name: str, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = parent.add_parser(name, help=help)
        p.add_argument("--config", help="YAML config file (default: $INFERPLEX_CONFIG, else embedded defaults)")
        return p

    keys = sub.add_parser("keys", help="create, list, revoke and rotate API keys").add_subparsers(
        dest="action", required=True
    )
    create = parser(keys, "create", "create a key; prints its secret once")
    create.add_argument("--name", required=True)
    create.add_argument("--account", help="bill this account (default: a new one)")
    create.add_argument("--credits", type=usd_to_micros, default=0, help="USD to add to the account")
    create.add_argument("--scopes", help="comma-separated (default: all but admin and metrics)")
    create.add_argument("--models", action="append", default=[], help="allowed model glob (repeatable)")
    create.add_argument("--ips", action="append", default=[], help="allowed address or CIDR (repeatable)")
    create.add_argument("--tags", action="append", default=[])
    for flag in ("--rpm", "--tpm", "--max-concurrent"):
        create.add_argument(flag, type=int)
    rule = "METRIC:PERIOD:MAX[:per_request], e.g. requests:day:1000 (repeatable; docs/accounts.md)"
    create.add_argument("--rule", action="append", default=[], type=_rule, help=f"a rate-limit rule, {rule}")
    create.add_argument("--user-rule", action="append", default=[], type=_rule, help="a rule per end user, as --rule")
    parser(keys, "list", "list keys")
    for action in ("revoke", "rotate"):
        parser(keys, action, f"{action} a key").add_argument("key_id")

    credits = sub.add_parser("credits", help="account balances and top-ups").add_subparsers(
        dest="action", required=True
    )
    add = parser(credits, "add", "add credits (USD) to an account")
    add.add_argument("account_id")
    add.add_argument("amount", type=usd_to_micros)
    add.add_argument("--note")
    parser(credits, "balance", "show an account's balance").add_argument("account_id")
    parser(credits, "ledger", "show an account's ledger").add_argument("account_id")

    usage = parser(sub, "usage", "usage totals")
    usage.add_argument("--by", choices=GROUPS, default="day")
    usage.add_argument("--key")
    usage.add_argument("--model")

    db = sub.add_parser("db", help="database tools").add_subparsers(dest="action", required=True)
    parser(db, "upgrade", "apply pending migrations")


def run(args: argparse.Namespace, config: Config) -> int:
    handler = _HANDLERS[(args.command, getattr(args, "action", None))]

    async def main() -> int:
        db = open_storage(database_url(config), config.storage)
        try:
            await db.migrate()
            return await handler(db, args)
        finally:
            await db.aclose()

    try:
        return asyncio.run(main())
    except ValidationError as exc:
        return _fail(invalid(exc))
    except GatewayError as exc:
        return _fail(exc)
    except Exception as exc:
        if unreachable(exc) is None:
            raise
        return _fail(GatewayError(f"the database cannot be reached ({type(unreachable(exc)).__name__})"))


def _rule(text: str) -> dict[str, Any] | str:
    """`metric:period:max[:per_request]` as a rule; anything else is passed on as given, for the same
    validation (and the same error naming `limit_rules`) as the admin API's."""
    parts = text.split(":")
    if len(parts) in (3, 4) and parts[2].isdigit() and parts[3:] in ([], ["per_request"]):
        return {"metric": parts[0], "period": parts[1], "max": int(parts[2]), "per_request": len(parts) == 4}
    return text


def _fail(error: GatewayError) -> int:
    print(f"inferplex: error: {error.message}", file=sys.stderr)
    return 2 if error.status == 400 else 1


def _print(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


async def _keys_create(db: Database, args: argparse.Namespace) -> int:
    fields: dict[str, Any] = {
        "name": args.name,
        "account_id": args.account,
        "credits_micros": args.credits,
        "allowed_models": args.models,
        "allowed_ips": args.ips,
        "tags": args.tags,
        "rpm": args.rpm,
        "tpm": args.tpm,
        "max_concurrent": args.max_concurrent,
        "limit_rules": args.rule,
        "user_limit_rules": args.user_rule,
    }
    if args.scopes:
        fields["scopes"] = [s.strip() for s in args.scopes.split(",")]
    record, secret = await ops.create_key(KeyStore(db), Ledger(db), KeyCreate.model_validate(fields))
    _print(ops.key_view(record, secret))
    return 0


async def _keys_list(db: Database, args: argparse.Namespace) -> int:
    records = await KeyStore(db).list()
    months = await Ledger(db).key_months([r.id for r in records])
    _print([ops.key_view(r, None, months.get(r.id)) for r in records])
    return 0


async def _keys_revoke(db: Database, args: argparse.Namespace) -> int:
    record = await KeyStore(db).revoke(args.key_id)
    _print(ops.key_view(record) if record else {"error": f"no key {args.key_id}"})
    return 0 if record else 1


async def _keys_rotate(db: Database, args: argparse.Namespace) -> int:
    record, secret = await ops.rotate_key(KeyStore(db), args.key_id)
    _print(ops.key_view(record, secret))
    return 0


async def _credits_add(db: Database, args: argparse.Namespace) -> int:
    change = CreditChange.model_validate({"amount_micros": args.amount, "note": args.note})
    balance = await ops.credit(Ledger(db), args.account_id, change)
    _print({"account_id": args.account_id, "balance_micros": balance})
    return 0


async def _credits_balance(db: Database, args: argparse.Namespace) -> int:
    account = await Ledger(db).account(args.account_id)
    _print(account.public() if account else {"error": f"no account {args.account_id}"})
    return 0 if account else 1


async def _credits_ledger(db: Database, args: argparse.Namespace) -> int:
    _print(await Ledger(db).entries(args.account_id))
    return 0


async def _usage(db: Database, args: argparse.Namespace) -> int:
    _print(await UsageStore(db).totals(args.by, UsageFilter(key_id=args.key, model=args.model)))
    return 0


async def _db_upgrade(db: Database, args: argparse.Namespace) -> int:
    print(f"database is at the newest schema ({db.url.split('://')[0]})")
    return 0


_HANDLERS: dict[tuple[str, str | None], Callable[[Database, argparse.Namespace], Awaitable[int]]] = {
    ("keys", "create"): _keys_create,
    ("keys", "list"): _keys_list,
    ("keys", "revoke"): _keys_revoke,
    ("keys", "rotate"): _keys_rotate,
    ("credits", "add"): _credits_add,
    ("credits", "balance"): _credits_balance,
    ("credits", "ledger"): _credits_ledger,
    ("usage", None): _usage,
    ("db", "upgrade"): _db_upgrade,
}
