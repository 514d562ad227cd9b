"""The console's sign-in sessions and its CSRF defence.

Signing in trades the master key, or a key with the `admin` scope, for a random session id in a cookie
(HttpOnly, SameSite=Strict, Path=/ui, Secure with `console.secure_cookie`): the key itself is never kept by
the browser, never put in a URL and never written into a page. The database keeps only the id's SHA-256
(migration 0017), so its rows sign nobody in.

Every page asks `signed_in(request)`: the row must exist and be unexpired, and its key must still be live
and still hold `admin`, with the same secret as at sign-in (the binding `accounts/auth.py` gives tokens),
so revoking, expiring, rotating or narrowing the key ends its sessions at once, on every replica; and its
`allowed_ips` hold for every page, as for every API request.

Every change is a POST that carries the session's CSRF token (a hidden `csrf` field, or htmx's
`X-CSRF-Token` header), and whose `Origin` (or, without one, `Referer`) names this host; SameSite=Strict
already keeps the cookie off other sites' requests, the token and origin checks keep it so on browsers or
proxies that do not.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import Column, Float, Index, MetaData, String, Table, delete, insert, select
from sqlalchemy.engine import Connection
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from inferplex.accounts.auth import client_ip, parse_networks
from inferplex.accounts.wiring import AccountServices
from inferplex.auth import MASTER, Principal
from inferplex.errors import GatewayError

COOKIE = "ipx_console"
PATH = "/ui"
LOGIN = "/ui/login"

metadata = MetaData()

console_sessions = Table(
    "console_sessions",
    metadata,
    Column("id_hash", String(64), primary_key=True),
    Column("key_id", String(40), nullable=False),
    Column("binding", String(128), nullable=False),
    Column("csrf", String(64), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Index("ix_console_sessions_expires", "expires_at"),
)


class SignInRequired(HTTPException):
    """Not signed in (or the session ended): go to the sign-in page. An HTTPException, so a handler that
    does not catch it still answers a redirect; `render.guarded` answers it as a plain 303."""

    def __init__(self) -> None:
        super().__init__(303, "Sign in first.", headers={"Location": LOGIN})


class Refused(GatewayError):
    """A change the console will not make: no or a wrong CSRF token, or a request from another origin."""

    status = 403
    type = "permission_error"
    code = "csrf_failed"


@dataclass(frozen=True, slots=True)
class Session:
    principal: Principal
    csrf: str
    id_hash: str
    expires_at: float

    @property
    def who(self) -> str:
        return "master key" if self.principal.key_id == "master" else f"{self.principal.name} ({self.principal.key_id})"


def _hash(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _accounts(request: Request) -> AccountServices:
    services: AccountServices = request.app.state.accounts
    return services


async def start(request: Request, principal: Principal) -> tuple[str, Session]:
    """A new session for `principal` (already checked to hold `admin`): the cookie value and the session."""
    accounts = _accounts(request)
    now = time.time()
    value = secrets.token_urlsafe(32)
    session = Session(principal, secrets.token_urlsafe(32), _hash(value), now + accounts.config.console.session_ttl_s)
    row = {
        "id_hash": session.id_hash,
        "key_id": principal.key_id,
        "binding": principal.binding,
        "csrf": session.csrf,
        "created_at": now,
        "expires_at": session.expires_at,
    }

    def write(conn: Connection) -> None:
        conn.execute(delete(console_sessions).where(console_sessions.c.expires_at < now))
        conn.execute(insert(console_sessions).values(row))

    await accounts.db.write(write)
    return value, session


def set_cookie(request: Request, response: Response, value: str) -> None:
    console = _accounts(request).config.console
    response.set_cookie(
        COOKIE,
        value,
        max_age=console.session_ttl_s,
        path=PATH,
        httponly=True,
        samesite="strict",
        secure=console.secure_cookie,
    )


def clear_cookie(request: Request, response: Response) -> None:
    console = _accounts(request).config.console
    response.delete_cookie(COOKIE, path=PATH, httponly=True, samesite="strict", secure=console.secure_cookie)


async def _find(request: Request) -> Session | None:
    value = request.cookies.get(COOKIE)
    if not value or len(value) > 100:
        return None
    id_hash = _hash(value)
    accounts = _accounts(request)

    def read(conn: Connection) -> Any:
        return conn.execute(select(console_sessions).where(console_sessions.c.id_hash == id_hash)).first()

    row = await accounts.db.read(read)
    if row is None or row.expires_at <= time.time():
        return None
    try:
        principal = await accounts.auth.principal_for(row.key_id)
    except GatewayError:  # revoked, expired or deleted since
        return None
    if "admin" not in principal.scopes or not hmac.compare_digest(principal.binding, row.binding):
        return None  # no longer an admin, or its secret was rotated (or the master key changed)
    if not await _from_allowed_address(request, accounts, row.key_id):
        return None
    return Session(principal, row.csrf, id_hash, row.expires_at)


async def _from_allowed_address(request: Request, accounts: AccountServices, key_id: str) -> bool:
    """The key's `allowed_ips` hold for every page, as for every API request (the key store's cache answers)."""
    if key_id == MASTER.key_id:
        return True
    found = await accounts.keys.by_id_with_account(key_id)
    if found is None or not found[0].allowed_ips:
        return found is not None
    peer = request.client.host if request.client else None
    ip = client_ip(peer, request.headers.get("x-forwarded-for"), accounts.auth.trusted)
    try:
        address = ipaddress.ip_address((ip or "").strip())
    except ValueError:
        return False
    return any(address in network for network in parse_networks(found[0].allowed_ips))


async def signed_in(request: Request) -> Session:
    """The request's session; raises `SignInRequired` (a 303 to /ui/login) without a live one. Kept on
    `request.state.console` for the page's template (its CSRF token, who is signed in)."""
    session: Session | None = getattr(request.state, "console", None)
    if session is None:
        session = await _find(request)
        if session is None:
            raise SignInRequired()
        request.state.console = session
    return session


async def end(request: Request) -> None:
    """Delete the request's session row, if it has one (signing out)."""
    value = request.cookies.get(COOKIE)
    if not value:
        return
    id_hash = _hash(value)

    def write(conn: Connection) -> None:
        conn.execute(delete(console_sessions).where(console_sessions.c.id_hash == id_hash))

    await _accounts(request).db.write(write)


def check_origin(request: Request) -> None:
    """Refuse a change sent from another site: `Sec-Fetch-Site` cross-site, or an `Origin` (else `Referer`)
    whose host is not the one this request was sent to (its Host header) nor one of
    `console.allowed_origins`. A request with neither header (curl, httpx) passes here; the CSRF token
    still guards it."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        raise Refused("This change was sent from another site.")
    origin = request.headers.get("origin")
    if origin is None:
        origin = request.headers.get("referer")
    if origin is None:
        return
    parts = urlsplit(origin)
    if parts.netloc and parts.netloc.lower() == request.headers.get("host", "").lower():
        return
    allowed = _accounts(request).config.console.allowed_origins
    if f"{parts.scheme}://{parts.netloc}".lower() in {o.rstrip("/").lower() for o in allowed}:
        return
    raise Refused("This change was sent from another origin.")


async def check_csrf(request: Request, form: Mapping[str, Any] | None = None) -> Session:
    """Signed in, from this origin, and carrying the session's CSRF token (form field `csrf` or header
    `X-CSRF-Token`); the session, else `SignInRequired` or `Refused` (403)."""
    session = await signed_in(request)
    check_origin(request)
    given = request.headers.get("x-csrf-token")
    if given is None and form is not None:
        value = form.get("csrf")
        given = value if isinstance(value, str) else None
    if not given or not hmac.compare_digest(given.encode(), session.csrf.encode()):
        raise Refused("The form's security token is missing or out of date: reload the page and try again.")
    return session
