"""Fetching a provider's file for the store: a GET streamed in chunks, redirects followed, size-limited.

A provider the operator configured is trusted to name its own file hosts, wherever they are (a local
deployment's URL may well be on a private address). A file named by something less trusted (a caller's
custom endpoint, say) is fetched with `public_only`: its URL and every redirect are checked against the
custom endpoints' address policy (custom_endpoints/addresses.py), and each connection goes only to the
addresses that were checked, as the custom endpoints' own session does. Redirects are followed here, one
hop at a time, so each hop is checked (aiohttp skips its resolver for an IP literal).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urljoin

import aiohttp

from inferplex.custom_endpoints.addresses import AddressRefused, PinnedResolver, checked_addresses, split_url
from inferplex.errors import UpstreamError

MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)


class Fetcher:
    """Two sessions, made when first needed: any address, or public addresses only."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=30)
        self._sessions: dict[bool, aiohttp.ClientSession] = {}

    def _session(self, public_only: bool) -> aiohttp.ClientSession:
        found = self._sessions.get(public_only)
        if found is None:
            connector = (
                aiohttp.TCPConnector(resolver=PinnedResolver(False), use_dns_cache=False) if public_only else None
            )
            found = self._sessions[public_only] = aiohttp.ClientSession(
                timeout=self._timeout, connector=connector, cookie_jar=aiohttp.DummyCookieJar()
            )
        return found

    @asynccontextmanager
    async def get(self, url: str, headers: dict[str, str], public_only: bool) -> AsyncIterator[aiohttp.ClientResponse]:
        """The answer to GET `url` after redirects. `headers` (the provider's key) go only to the URL's own
        host: a redirect elsewhere (a CDN, a presigned bucket URL) does not carry them."""
        session = self._session(public_only)
        first_host = _host(url)
        for _ in range(MAX_REDIRECTS + 1):
            host = _host(url)
            if public_only:
                await _check(url)
            sent = headers if host == first_host else {}
            async with session.get(url, headers=sent, allow_redirects=False) as answer:
                location = answer.headers.get("location")
                if answer.status in _REDIRECTS and location:
                    url = urljoin(url, location)
                    continue
                yield answer
                return
        raise UpstreamError(f"Fetching the provider's file took more than {MAX_REDIRECTS} redirects.")

    async def aclose(self) -> None:
        for session in self._sessions.values():
            await session.close()


def _host(url: str) -> str:
    try:
        return split_url(url)[1]
    except AddressRefused as exc:
        raise UpstreamError(f"The provider's file URL is refused: {exc.reason}.", code="media_url_refused") from None


async def _check(url: str) -> None:
    try:
        _, host, port = split_url(url)
        await checked_addresses(host, port, allow_private=False)
    except AddressRefused as exc:
        raise UpstreamError(f"The provider's file URL is refused: {exc.reason}.", code="media_url_refused") from None
