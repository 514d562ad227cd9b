"""The console's accounts: balances, creating one, editing its limits, top-ups and adjustments, and its
ledger a page at a time (newest first, `before` the last entry's id). Changes go through
admin/operations.py and the admin API's models, as the admin API's own routes do."""

from __future__ import annotations

import time
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.accounts.wiring import AccountServices
from inferplex.admin import operations as ops
from inferplex.admin.models import AccountCreate, AccountUpdate, CreditChange
from inferplex.console import forms, render, session
from inferplex.console.key_pages import status_of
from inferplex.errors import InvalidRequest, NotFound
from inferplex.store.ledger import Account

LEDGER_PAGE = 50
MAX_ID = 2**63 - 1
CREATE_FIELDS = tuple(AccountCreate.model_fields)
EDIT_FIELDS = tuple(AccountUpdate.model_fields)


def _services(request: Request) -> AccountServices:
    services: AccountServices = request.app.state.accounts
    return services


def _values(account: Account | None, form: FormData | None, names: tuple[str, ...]) -> dict[str, str]:
    values: dict[str, str] = {}
    for name in names:
        if form is not None:
            value = form.get(name)
            values[name] = value if isinstance(value, str) else ""
        else:
            values[name] = forms.shown(getattr(account, name, None))
    return values


async def _list_page(request: Request, form: FormData | None = None, error: InvalidRequest | None = None) -> Response:
    accounts = await _services(request).ledger.accounts()
    context = {"accounts": accounts, "values": _values(None, form, CREATE_FIELDS), "error": error}
    return render.page(request, "accounts.html", context, 400 if error else 200)


async def list_accounts(request: Request) -> Response:
    await session.signed_in(request)
    return await _list_page(request)


async def create_account(request: Request) -> Response:
    form = await render.read_form(request)
    await session.check_csrf(request, form)
    try:
        body = forms.parse(AccountCreate, forms.fields(form, CREATE_FIELDS, present_only=False))
        account = await ops.create_account(_services(request).ledger, body)
    except InvalidRequest as error:
        return await _list_page(request, form, error)
    return render.see_other(f"/ui/accounts/{account.id}")


async def _account(request: Request) -> Account:
    account_id = request.path_params["account_id"]
    account = await _services(request).ledger.account(account_id)
    if account is None:
        raise NotFound(f"No account {account_id!r}.", param="account_id", code="account_not_found")
    return account


def _before(request: Request) -> int | None:
    value = request.query_params.get("before")
    if value is None:
        return None
    if not value.isdigit() or not 1 <= int(value) <= MAX_ID:
        raise InvalidRequest(f"`before` must be an integer from 1 to {MAX_ID}.", param="before")
    return int(value)


async def _account_page(
    request: Request,
    account: Account,
    form: FormData | None = None,
    error: InvalidRequest | None = None,
    credit_error: InvalidRequest | None = None,
) -> Response:
    s = _services(request)
    before = _before(request)
    rows = await s.ledger.entries(account.id, LEDGER_PAGE + 1, before)
    entries = rows[:LEDGER_PAGE]
    keys, now = await s.keys.list(account.id), time.time()
    context: dict[str, Any] = {
        "account": account,
        "entries": entries,
        "older": entries[-1]["id"] if len(rows) > LEDGER_PAGE else None,
        "paged": before is not None,
        "keys": [(k, status_of(k, now)) for k in keys],
        "values": _values(account, form if error else None, EDIT_FIELDS),
        "error": error,
        "credit_error": credit_error,
        "credit": {
            "amount": (form.get("amount") if credit_error and form else "") or "",
            "note": (form.get("note") if credit_error and form else "") or "",
        },
    }
    return render.page(request, "account.html", context, 400 if error or credit_error else 200)


async def show_account(request: Request) -> Response:
    await session.signed_in(request)
    return await _account_page(request, await _account(request))


async def edit_account(request: Request) -> Response:
    form = await render.read_form(request)
    await session.check_csrf(request, form)
    account = await _account(request)
    try:
        body = forms.parse(AccountUpdate, forms.fields(form, EDIT_FIELDS, present_only=True))
    except InvalidRequest as error:
        return await _account_page(request, account, form, error=error)
    await _services(request).ledger.update_account(account.id, body.model_dump(exclude_unset=True))
    return render.see_other(f"/ui/accounts/{account.id}")


async def change_credits(request: Request) -> Response:
    form = await render.read_form(request)
    await session.check_csrf(request, form)
    account = await _account(request)
    try:
        amount = forms.dollars_to_micros(str(form.get("amount") or ""))
        kind = form.get("kind") or "topup"
        note = form.get("note") or None
        change = forms.parse(CreditChange, {"amount_micros": amount, "kind": kind, "note": note})
        await ops.credit(_services(request).ledger, account.id, change, "amount")
    except InvalidRequest as error:
        return await _account_page(request, account, form, credit_error=error)
    return render.see_other(f"/ui/accounts/{account.id}")


ROUTES = [
    Route("/ui/accounts", render.guarded(list_accounts), methods=["GET"]),
    Route("/ui/accounts", render.guarded(create_account), methods=["POST"]),
    Route("/ui/accounts/{account_id}", render.guarded(show_account), methods=["GET"]),
    Route("/ui/accounts/{account_id}", render.guarded(edit_account), methods=["POST"]),
    Route("/ui/accounts/{account_id}/credits", render.guarded(change_credits), methods=["POST"]),
]
