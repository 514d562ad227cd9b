"""The console's keys: the list, creating one (its secret shown once), editing every field the admin API
edits, rotating and revoking. Every change goes through admin/operations.py and the admin API's models
(admin/models.py), so the console and the API refuse and store exactly alike."""

from __future__ import annotations

import time
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.accounts.wiring import AccountServices
from inferplex.admin import operations as ops
from inferplex.admin.models import DEFAULT_SCOPES, KeyCreate, KeyUpdate
from inferplex.auth import ALL_SCOPES
from inferplex.console import forms, render, session
from inferplex.errors import NotFound
from inferplex.store.keys import KeyRecord

CREATE_FIELDS = tuple(KeyCreate.model_fields)
EDIT_FIELDS = tuple(KeyUpdate.model_fields)
SCOPES = sorted(ALL_SCOPES)


def _services(request: Request) -> AccountServices:
    services: AccountServices = request.app.state.accounts
    return services


def status_of(record: KeyRecord, now: float) -> str:
    if record.revoked_at is not None:
        return "revoked"
    if record.expires_at is not None and record.expires_at <= now:
        return "expired"
    return "active"


async def _views(request: Request, records: list[KeyRecord]) -> list[dict[str, Any]]:
    """Keys as the admin API shows them (with the month's spend), plus their status."""
    months = await _services(request).ledger.key_months([r.id for r in records])
    now = time.time()
    return [{**ops.key_view(r, None, months.get(r.id)), "status": status_of(r, now)} for r in records]


def _form_values(record: KeyRecord | None, form: FormData | None) -> dict[str, str]:
    """What each field of the key form shows: what was just submitted (after a refusal), else the key's own."""
    values: dict[str, str] = {}
    for name in CREATE_FIELDS:
        if form is not None and name != "scopes":
            value = form.get(name)
            values[name] = value if isinstance(value, str) else ""
        elif record is not None and name == "expires_at":
            values[name] = forms.expiry_shown(record.expires_at)
        elif record is not None and hasattr(record, name):
            values[name] = forms.shown(getattr(record, name))
        else:
            values[name] = ""
    return values


def _checked(record: KeyRecord | None, form: FormData | None) -> set[str]:
    if form is not None:
        return {s for s in form.getlist("scopes") if isinstance(s, str)}
    return set(record.scopes) if record is not None else set(DEFAULT_SCOPES)


async def _list_page(request: Request, form: FormData | None = None, error: forms.FormError | None = None) -> Response:
    s = _services(request)
    account_id = request.query_params.get("account_id") or None
    records = await s.keys.list(account_id)
    accounts = await s.ledger.accounts()
    context = {
        "keys": await _views(request, records),
        "accounts": accounts,
        "account_names": {a.id: a.name for a in accounts},
        "account_id": account_id,
        "scopes": SCOPES,
        "checked": _checked(None, form),
        "values": _form_values(None, form),
        "error": error,
    }
    return render.page(request, "keys.html", context, 400 if error else 200)


async def list_keys(request: Request) -> Response:
    await session.signed_in(request)
    return await _list_page(request)


async def create_key(request: Request) -> Response:
    form = await render.read_form(request)
    await session.check_csrf(request, form)
    s = _services(request)
    try:
        body = forms.parse(KeyCreate, forms.fields(form, CREATE_FIELDS, present_only=False))
        record, secret = await ops.create_key(s.keys, s.ledger, body)
    except forms.FormError as error:
        return await _list_page(request, form, error)
    except NotFound as missing:  # the account chosen has gone
        return await _list_page(request, form, forms.FormError(missing.message, param=missing.param))
    view = (await _views(request, [record]))[0]
    return render.page(request, "key_secret.html", {"key": view, "secret": secret, "rotated": False})


async def _record(request: Request) -> KeyRecord:
    key_id = request.path_params["key_id"]
    record = await _services(request).keys.get(key_id)
    if record is None:
        raise NotFound(f"No key {key_id!r}.", param="key_id", code="key_not_found")
    return record


async def _key_page(
    request: Request, record: KeyRecord, form: FormData | None = None, error: forms.FormError | None = None
) -> Response:
    s = _services(request)
    account = await s.ledger.account(record.account_id) if record.account_id else None
    context = {
        "key": (await _views(request, [record]))[0],
        "account": account,
        "scopes": SCOPES,
        "checked": _checked(record, form),
        "values": _form_values(record, form),
        "error": error,
    }
    return render.page(request, "key.html", context, 400 if error else 200)


async def show_key(request: Request) -> Response:
    await session.signed_in(request)
    return await _key_page(request, await _record(request))


async def edit_key(request: Request) -> Response:
    form = await render.read_form(request)
    await session.check_csrf(request, form)
    record = await _record(request)
    try:
        body = forms.parse(KeyUpdate, forms.fields(form, EDIT_FIELDS, present_only=True))
    except forms.FormError as error:
        return await _key_page(request, record, form, error)
    changed = await _services(request).keys.update(record.id, body.model_dump(exclude_unset=True))
    if changed is None:
        raise NotFound(f"No key {record.id!r}.", param="key_id", code="key_not_found")
    return render.see_other(f"/ui/keys/{record.id}")


async def rotate_key(request: Request) -> Response:
    form = await render.read_form(request)
    await session.check_csrf(request, form)
    record, secret = await ops.rotate_key(_services(request).keys, request.path_params["key_id"])
    view = (await _views(request, [record]))[0]
    return render.page(request, "key_secret.html", {"key": view, "secret": secret, "rotated": True})


async def revoke_key(request: Request) -> Response:
    form = await render.read_form(request)
    await session.check_csrf(request, form)
    record = await _record(request)
    await _services(request).keys.revoke(record.id)
    return render.see_other(f"/ui/keys/{record.id}")


ROUTES = [
    Route("/ui/keys", render.guarded(list_keys), methods=["GET"]),
    Route("/ui/keys", render.guarded(create_key), methods=["POST"]),
    Route("/ui/keys/{key_id}", render.guarded(show_key), methods=["GET"]),
    Route("/ui/keys/{key_id}", render.guarded(edit_key), methods=["POST"]),
    Route("/ui/keys/{key_id}/rotate", render.guarded(rotate_key), methods=["POST"]),
    Route("/ui/keys/{key_id}/revoke", render.guarded(revoke_key), methods=["POST"]),
]
