"""The console's routes (sign-in, keys, accounts) in /openapi.json.

Console pages answer HTML (200), a 303 to the next page (after a form, or to /ui/login when not signed in),
or an error page (HTML) with its status; the document says so with `page` below, which the data pages'
operations (openapi/console_views.py) use too. They are signed in by the session cookie, not a bearer
credential, so they are listed without `security`; a change (POST) needs the session's CSRF token.
"""

from __future__ import annotations

from typing import Any

from inferplex.console.cache_page import WINDOWS as CACHE_WINDOWS
from inferplex.dialects.openai_responses import OpenAIError
from inferplex.openapi.spec import Dialect, Operation, Param

CONSOLE = Dialect("Console", OpenAIError, security=())
HTML = "text/html"
_GET_ERRORS = (400, 404, 500, 503)
_POST_ERRORS = (400, 403, 404, 413, 500, 503)


def _form(fields: dict[str, Any], required: tuple[str, ...] = ("csrf",)) -> dict[str, Any]:
    return {"type": "object", "properties": fields, "required": list(required)}


_CSRF = {"csrf": {"type": "string", "description": "the session's CSRF token (or the X-CSRF-Token header)"}}


def page(
    method: str,
    path: str,
    summary: str,
    *,
    params: tuple[Param, ...] = (),
    form: dict[str, Any] | None = None,
    ok: bool = True,
    errors: tuple[int, ...] | None = None,
    ok_media: str = HTML,
    description: str | None = None,
) -> Operation:
    """A console route: HTML on success (unless `ok` is False: a form that only redirects), a 303, and errors
    as HTML or the OpenAI error object. `form`: the urlencoded fields a POST takes (besides `csrf`)."""
    post = method == "post"
    return Operation(
        method,
        path,
        summary,
        CONSOLE,
        None,
        errors if errors is not None else (_POST_ERRORS if post else _GET_ERRORS),
        ok_media=ok_media if ok else HTML,
        redirects=(303,),
        error_media=HTML,
        params=params,
        description=description,
        authenticated=False,
        body=None,
        form=None if form is None else _form({**_CSRF, **form}),
        form_media="application/x-www-form-urlencoded",
    )


_TEXT = {"type": "string"}
_INT = {"type": "integer"}
_LIST = {"type": "array", "items": {"type": "string"}}
_KEY_FIELDS: dict[str, Any] = {
    "name": _TEXT,
    "account_id": _TEXT,
    "credits_micros": _TEXT,
    "scopes": _LIST,
    "allowed_models": _TEXT,
    "allowed_ips": _TEXT,
    "tags": _TEXT,
    "rpm": _TEXT,
    "tpm": _TEXT,
    "max_concurrent": _TEXT,
    "monthly_cap_micros": _TEXT,
    "expires_at": _TEXT,
    "metadata": _TEXT,
    "default_processors": _TEXT,
    "enforced_processors": _TEXT,
    "limit_rules": _TEXT,
    "user_limit_rules": _TEXT,
}
_ACCOUNT_FIELDS: dict[str, Any] = {
    "name": _TEXT,
    "credits_micros": _TEXT,
    "rpm": _TEXT,
    "tpm": _TEXT,
    "max_concurrent": _TEXT,
    "monthly_cap_micros": _TEXT,
    "limit_rules": _TEXT,
}
_CREDIT_FIELDS = {
    "amount": {"type": "string", "description": "US dollars, e.g. 12.50 (negative: an adjustment down)"},
    "kind": {"type": "string", "enum": ["topup", "refund", "adjust"]},
    "note": _TEXT,
}
_BEFORE = Param("before", {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}, description="ledger cursor")

OPERATIONS: list[Operation] = [
    page("get", "/ui", "The console (to the keys, or to sign in)", ok=False),
    page("get", "/ui/login", "The sign-in page"),
    page(
        "post",
        "/ui/login",
        "Sign in with the master key or an admin key: a session cookie (HttpOnly, SameSite=Strict, Path=/ui)",
        form={"key": _TEXT},
        errors=(400, 401, 403, 413, 500, 503),
    ),
    page("post", "/ui/logout", "Sign out (the session is deleted)", form={}, ok=False),
    page("get", "/ui/static/{name}", "A vendored console asset (htmx, uPlot, the stylesheet)", ok_media="*/*"),
    page("get", "/ui/keys", "Keys, and the form that creates one", params=(Param("account_id"),)),
    page("post", "/ui/keys", "Create a key (the secret is shown once)", form=_KEY_FIELDS),
    page("get", "/ui/keys/{key_id}", "One key: edit, rotate, revoke"),
    page("post", "/ui/keys/{key_id}", "Edit a key", form=_KEY_FIELDS),
    page("post", "/ui/keys/{key_id}/rotate", "Replace a key's secret (the new one is shown once)", form={}),
    page("post", "/ui/keys/{key_id}/revoke", "Revoke a key", form={}, ok=False),
    page("get", "/ui/accounts", "Accounts with their balances, and the form that creates one"),
    page("post", "/ui/accounts", "Create an account", form=_ACCOUNT_FIELDS, ok=False),
    page("get", "/ui/accounts/{account_id}", "One account: its limits, credits and ledger", params=(_BEFORE,)),
    page("post", "/ui/accounts/{account_id}", "Edit an account's name and limits", form=_ACCOUNT_FIELDS, ok=False),
    page("post", "/ui/accounts/{account_id}/credits", "Top up, refund or adjust", form=_CREDIT_FIELDS, ok=False),
    page(
        "post",
        "/ui/cache/purge",
        "Purge cached answers matching every field filled in (or all): then the cache page, saying how many",
        form={
            "model": {"type": "string"},
            "namespace": {"type": "string"},
            "key_id": {"type": "string"},
            "entry": {"type": "string"},
            "scope": {"type": "string", "description": "account:<id>, key:<id>, shared or open"},
            "all": {"type": "string", "enum": ["on"], "description": "every entry (alone)"},
            "window": {"type": "string", "enum": list(CACHE_WINDOWS)},
        },
        ok=False,
        errors=(400, 403, 409, 413, 500, 503),
    ),
]
