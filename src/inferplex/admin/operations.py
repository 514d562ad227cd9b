"""What an administrator can do, independent of HTTP: shared by the admin API and the `inferplex` CLI."""

from __future__ import annotations

from typing import Any

from inferplex.accounts.keys import display_prefix, key_digest, new_key_id, new_secret
from inferplex.admin.models import INT64_MAX, AccountCreate, CreditChange, KeyCreate
from inferplex.errors import InvalidRequest, NotFound
from inferplex.store.keys import KeyRecord, KeyStore
from inferplex.store.ledger import Account, Ledger, MonthSpend

_OUT_OF_RANGE = "22003"  # PostgreSQL's numeric_value_out_of_range: a BIGINT sum that overflowed


async def credit(ledger: Ledger, account_id: str, change: CreditChange, param: str = "amount_micros") -> int:
    """Add `change` to the account's balance: the new balance. Refused (400 naming `param`) if the balance
    would leave the 64-bit range, where SQLite would turn it into a float that no longer equals its ledger
    and PostgreSQL would fail the statement. The balance is read first; PostgreSQL's own overflow check
    covers a concurrent top-up in between (SQLite's single writer leaves only another process, such as the
    CLI, able to race it)."""
    account = await ledger.account(account_id)
    if account is None:
        raise NotFound(f"No account {account_id!r}.", param="account_id", code="account_not_found")
    after = account.balance_micros + change.amount_micros
    if not -INT64_MAX <= after <= INT64_MAX:
        raise _overflow(param, account.balance_micros)
    try:
        return await ledger.credit(account_id, change.amount_micros, kind=change.kind, note=change.note)
    except Exception as exc:
        if getattr(exc, "sqlstate", None) == _OUT_OF_RANGE:
            raise _overflow(param, None) from None
        raise


def _overflow(param: str, balance: int | None) -> InvalidRequest:
    now = "" if balance is None else f" (it is {balance})"
    return InvalidRequest(
        f"`{param}` would take the balance{now} beyond what a balance can hold (±{INT64_MAX} micro-USD).",
        param=param,
        code="balance_out_of_range",
    )


async def create_account(ledger: Ledger, body: AccountCreate) -> Account:
    account = await ledger.create_account(
        body.name,
        rpm=body.rpm,
        tpm=body.tpm,
        max_concurrent=body.max_concurrent,
        limit_rules=[r.model_dump() for r in body.limit_rules],
        monthly_cap_micros=body.monthly_cap_micros,
    )
    if body.credits_micros:
        change = CreditChange(amount_micros=body.credits_micros, note="initial credits")
        await credit(ledger, account.id, change, "credits_micros")
        found = await ledger.account(account.id)
        assert found is not None
        account = found
    return account


async def create_key(keys: KeyStore, ledger: Ledger, body: KeyCreate) -> tuple[KeyRecord, str]:
    """A new key (and its account, unless one is named): the secret is returned here and never again."""
    if body.account_id is None:
        account_id = (await ledger.create_account(body.name)).id
    else:
        if await ledger.account(body.account_id) is None:
            raise NotFound(f"No account {body.account_id!r}.", param="account_id", code="account_not_found")
        account_id = body.account_id
    if body.credits_micros:
        change = CreditChange(amount_micros=body.credits_micros, note=f"credits with key {body.name}")
        await credit(ledger, account_id, change, "credits_micros")
    secret = new_secret()
    record = KeyRecord(
        id=new_key_id(),
        hash=key_digest(secret),
        prefix=display_prefix(secret),
        name=body.name,
        account_id=account_id,
        scopes=sorted(set(body.scopes)),
        allowed_models=body.allowed_models,
        allowed_ips=body.allowed_ips,
        tags=body.tags,
        metadata=body.metadata,
        default_processors=body.default_processors,
        enforced_processors=body.enforced_processors,
        rpm=body.rpm,
        tpm=body.tpm,
        max_concurrent=body.max_concurrent,
        limit_rules=[r.model_dump() for r in body.limit_rules],
        user_limit_rules=[r.model_dump() for r in body.user_limit_rules],
        monthly_cap_micros=body.monthly_cap_micros,
        expires_at=body.expires_at,
    )
    await keys.create(record)
    return record, secret


async def rotate_key(keys: KeyStore, key_id: str) -> tuple[KeyRecord, str]:
    secret = new_secret()
    record = await keys.rotate(key_id, key_digest(secret), display_prefix(secret))
    if record is None:
        raise NotFound(f"No active key {key_id!r}.", param="key_id", code="key_not_found")
    return record, secret


def key_view(record: KeyRecord, secret: str | None = None, month: MonthSpend | None = None) -> dict[str, Any]:
    """A key as the admin API shows it, with its month's spend beside its cap (`month`; none yet: 0)."""
    month = month or MonthSpend()
    out = {"object": "api_key", **record.public()}
    out["month_spent_micros"], out["month_reserved_micros"] = month.month_spent_micros, month.month_reserved_micros
    if secret is not None:
        out["key"] = secret
    return out
