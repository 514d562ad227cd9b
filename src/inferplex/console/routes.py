"""The console's routes, all under /ui: each page module declares its own (`ROUTES`)."""

from __future__ import annotations

from starlette.routing import Route

from inferplex.console import (
    account_pages,
    auth_pages,
    cache_page,
    key_pages,
    provider_pages,
    request_pages,
    usage_pages,
)

ROUTES: list[Route] = [
    *auth_pages.ROUTES,
    *key_pages.ROUTES,
    *account_pages.ROUTES,
    *usage_pages.ROUTES,
    *request_pages.ROUTES,
    *provider_pages.ROUTES,
    *cache_page.ROUTES,
]
