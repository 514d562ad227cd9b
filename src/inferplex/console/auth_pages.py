"""Signing in and out of the console, its front door, and its static assets.

A key is checked exactly as the API checks it (`accounts.auth`: the master key, or a stored key that is live,
allowed from this address and holds `admin`): the form's key is handed to the gateway's authenticator as a
bearer credential of a request of our own making, so there is one implementation of what a valid key is.
Access tokens are refused here: a session would outlive them.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.accounts.tokens import TOKEN_PREFIX
from inferplex.auth import Principal
from inferplex.console import render, session
from inferplex.errors import GatewayError, NotFound, PermissionDenied, Unauthenticated

STATIC = Path(__file__).parent / "static"
MAX_KEY = 512


def _assets() -> dict[str, tuple[bytes, str]]:
    """Every file in console/static, read once: name -> (bytes, media type). Markdown (VENDORED.md) is not served."""
    out: dict[str, tuple[bytes, str]] = {}
    for path in STATIC.iterdir() if STATIC.is_dir() else ():
        if path.is_file() and path.suffix in (".js", ".css", ".svg", ".png", ".ico"):
            media = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            if media.startswith("text/") or media.endswith("javascript"):
                media += "; charset=utf-8"
            out[path.name] = (path.read_bytes(), media)
    return out


ASSETS = _assets()


async def static(request: Request) -> Response:
    found = ASSETS.get(request.path_params["name"])
    if found is None:
        raise NotFound(f"No console asset {request.path_params['name']!r}.", code="asset_not_found")
    body, media = found
    return Response(
        body,
        headers={"content-type": media, "cache-control": "public, max-age=3600", "x-content-type-options": "nosniff"},
    )


async def home(request: Request) -> Response:
    await session.signed_in(request)
    return render.see_other("/ui/keys")


async def login_page(request: Request) -> Response:
    try:
        await session.signed_in(request)
    except session.SignInRequired:
        return render.page(request, "login.html", {"error": None})
    return render.see_other("/ui/keys")


async def _admin_principal(request: Request, key: str) -> Principal:
    """The principal of `key`, checked as the API checks a bearer credential, and holding `admin`."""
    if not key or len(key) > MAX_KEY or not key.isascii() or not key.isprintable() or key.startswith(TOKEN_PREFIX):
        raise Unauthenticated("Incorrect key.")
    headers = [(b"authorization", b"Bearer " + key.encode())]
    headers += [(k, v) for k, v in request.scope["headers"] if k in (b"x-forwarded-for", b"host")]
    probe = Request({**request.scope, "headers": headers})
    principal: Principal = await request.app.state.accounts.auth.authenticate(probe)
    if "admin" not in principal.scopes:
        raise PermissionDenied("This key does not have the admin scope.", code="scope_not_allowed")
    return principal


async def login(request: Request) -> Response:
    session.check_origin(request)
    form = await render.read_form(request)
    key = form.get("key")
    try:
        principal = await _admin_principal(request, key if isinstance(key, str) else "")
    except GatewayError as error:
        # the key is never written back into the page: the field comes back empty
        status = error.status if error.status in (401, 403) else 401
        return render.page(request, "login.html", {"error": error.message}, status)
    value, _ = await session.start(request, principal)
    response = render.see_other("/ui/keys")
    session.set_cookie(request, response, value)
    return response


async def logout(request: Request) -> Response:
    form = await render.read_form(request)
    await session.check_csrf(request, form)
    await session.end(request)
    response = render.see_other("/ui/login")
    session.clear_cookie(request, response)
    return response


ROUTES = [
    Route("/ui", render.guarded(home), methods=["GET"]),
    Route("/ui/login", render.guarded(login_page), methods=["GET"]),
    Route("/ui/login", render.guarded(login), methods=["POST"]),
    Route("/ui/logout", render.guarded(logout), methods=["POST"]),
    Route("/ui/static/{name}", render.guarded(static), methods=["GET"]),
]
