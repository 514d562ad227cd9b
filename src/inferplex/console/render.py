"""Rendering the console's pages: one jinja2 environment (autoescaped) over the package's templates, the
headers every page carries, and `guarded`, which turns what a page handler raises into a page.

Pages are server-rendered HTML with htmx for partial updates and uPlot for charts (both vendored in
console/static, docs/architecture.md says why). The Content-Security-Policy allows scripts and styles from
/ui/static only: no inline script runs, so data for a chart travels in `<script type="application/json">`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import jinja2
from starlette.datastructures import FormData
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from inferplex.console.query import utc
from inferplex.console.session import Session, SignInRequired
from inferplex.errors import GatewayError, InvalidRequest, Unavailable
from inferplex.store.backend import unreachable

log = logging.getLogger(__name__)
Page = Callable[[Request], Awaitable[Response]]

HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}
MAX_FORM_FIELDS = 1000
MAX_FORM_BYTES = 256 * 1024  # the largest form the console takes (a key's metadata and processors as JSON)


def dollars(micros: int | None) -> str:
    """Micro-USD as dollars, to the cent; below a cent, to the micro-dollar (a cheap request's cost)."""
    if micros is None:
        return "—"
    if micros and abs(micros) < 10_000:
        return f"{'-' if micros < 0 else ''}${abs(micros) / 1e6:.6f}"
    return f"{'-' if micros < 0 else ''}${abs(micros) / 1e6:,.2f}"


def when(seconds: float | None) -> str:
    """UNIX seconds as UTC, to the second, as every page shows a moment (`query.utc`); a dash for none."""
    return utc(seconds) or "—"


ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("inferplex.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENV.filters["dollars"] = dollars
ENV.filters["when"] = when

NAV = (
    ("keys", "Keys", "/ui/keys"),
    ("accounts", "Accounts", "/ui/accounts"),
    ("usage", "Usage", "/ui/usage"),
    ("requests", "Requests", "/ui/requests"),
    ("providers", "Providers", "/ui/providers"),
    ("models", "Models", "/ui/models"),
    ("cache", "Cache", "/ui/cache"),
)


def page(request: Request, template: str, context: Mapping[str, Any] | None = None, status: int = 200) -> Response:
    """`template` rendered with `context`, plus what base.html reads: `session` (None before sign-in), `csrf`
    (the session's form token, or ""), `nav` and `path` (the current page's path, to mark its nav link)."""
    session: Session | None = getattr(request.state, "console", None)
    values = {
        "session": session,
        "csrf": session.csrf if session else "",
        "nav": NAV,
        "path": request.url.path,
        **(context or {}),
    }
    html = ENV.get_template(template).render(values)
    return HTMLResponse(html, status, headers=HEADERS)


def see_other(location: str) -> Response:
    """After a change, the page to show (POST, then redirect, then GET: a reload does not repeat it)."""
    return RedirectResponse(location, 303, headers=HEADERS)


def problem(request: Request, error: GatewayError) -> Response:
    """A refusal as a page with its status (403 for a CSRF failure, 404 for an unknown key...)."""
    return page(request, "error.html", {"error": error}, error.status if 400 <= error.status < 600 else 500)


def _storable(request: Request) -> None:
    """No path or query parameter holding NUL, which no store can hold (PostgreSQL refuses it even in a
    comparison): a 400 naming it, whichever parameter the page reads."""
    for name, value in [*request.path_params.items(), *request.query_params.multi_items()]:
        if "\x00" in value:
            raise InvalidRequest(f"`{name}` contains a NUL character.", param=name)


def guarded(handler: Page) -> Page:
    """A page handler whose `SignInRequired` becomes a 303 to the sign-in page (for an htmx request, an
    `HX-Redirect` to it: htmx would follow a 303 inside its XHR and swap the sign-in page into a fragment),
    and whose `GatewayError`s (a CSRF refusal, an unknown id, an admin operation's refusal, a parameter
    holding NUL) become an error page with their status; an unreachable database is a 503 page, as the API
    answers it (edge.endpoint)."""

    @functools.wraps(handler)
    async def run(request: Request) -> Response:
        try:
            _storable(request)
            return await handler(request)
        except SignInRequired:
            if request.headers.get("hx-request") == "true":  # an htmx poll or fragment: load the page whole
                return Response(status_code=200, headers={**HEADERS, "HX-Redirect": "/ui/login"})
            return see_other("/ui/login")
        except GatewayError as error:
            return problem(request, error)
        except ClientDisconnect:  # gone before its form arrived: nobody to answer
            return Response(status_code=499)
        except Exception as exc:
            if unreachable(exc) is None:
                raise
            log.warning("%s: the database cannot be reached (%s)", request.url.path, type(exc).__name__)
            message = "The gateway's database cannot be reached right now; try again shortly."
            return problem(request, Unavailable(message, code="store_unavailable"))

    return run


async def read_form(request: Request) -> FormData:
    """The POSTed form (urlencoded or multipart, no files), bounded; refused (400) when larger."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_FORM_BYTES):
        raise InvalidRequest(f"A console form holds at most {MAX_FORM_BYTES} bytes.")
    try:
        return await request.form(max_files=0, max_fields=MAX_FORM_FIELDS, max_part_size=MAX_FORM_BYTES)
    except Exception as exc:  # multipart's parse errors (a bad boundary, too many fields, a file)
        raise InvalidRequest(f"The form could not be read: {type(exc).__name__}.") from None
