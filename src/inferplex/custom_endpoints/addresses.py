"""Where a custom endpoint may connect: the SSRF policy, and a resolver that connects only where it checked.

A caller's URL must not reach the gateway's own network (its metadata service, a database on localhost, the
cluster's private addresses). A name is resolved when the endpoint is registered AND on every call, and the
call connects to exactly the addresses that were checked: `PinnedResolver` is the aiohttp resolver of the
custom endpoints' own session, so aiohttp never looks the name up a second time behind the check (a name
whose DNS answer changes to 127.0.0.1 after registration is refused, not followed). TLS still verifies the
certificate against the URL's host name and the Host header is the URL's, since only the lookup is ours.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult

IP = ipaddress.IPv4Address | ipaddress.IPv6Address

# Ranges no caller's upstream lives in, beyond what `ipaddress` flags itself: CGNAT (RFC 6598, often a
# provider's internal network), the IPv4 benchmarking and IETF blocks, NAT64's well-known prefix (which maps
# back onto IPv4) and the cloud metadata addresses that are not in a private range (AWS's IPv6 one).
_EXTRA_BLOCKED = tuple(
    ipaddress.ip_network(n)
    for n in ("100.64.0.0/10", "192.0.0.0/24", "198.18.0.0/15", "64:ff9b::/96", "64:ff9b:1::/48", "fd00:ec2::/32")
)


class AddressRefused(Exception):
    """A URL or a name's address the policy refuses; `reason` says which rule, for the caller's 400."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def refusal(address: IP) -> str | None:
    """Why `address` may not be reached from a custom endpoint, or None when it may. IPv4-mapped and
    6to4-embedded IPv6 addresses are judged by the IPv4 address they carry."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour
        if inner is not None:
            return refusal(inner)
    checks = (
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address (the cloud metadata service lives there)"),
        (address.is_multicast, "a multicast address"),
        (address.is_unspecified, "the unspecified address"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (any(address in net for net in _EXTRA_BLOCKED), "an internal or shared (CGNAT) address"),
    )
    return next((why for hit, why in checks if hit), None)


Lookup = Callable[[str, int], Awaitable[list[str]]]


async def system_lookup(host: str, port: int) -> list[str]:
    """Every address the system resolver gives `host` (both families, TCP)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


# The lookup every check uses: tests replace it with a resolver they control (the gateway runs in-process).
lookup: Lookup = system_lookup


def split_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL without credentials; AddressRefused otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise AddressRefused("it is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise AddressRefused("it must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise AddressRefused("it must not carry credentials (store the key with /v0/custom_api_key)")
    return parts.scheme, parts.hostname, port or (443 if parts.scheme == "https" else 80)


def _literal(host: str) -> IP | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


async def checked_addresses(host: str, port: int, allow_private: bool) -> list[str]:
    """The addresses to connect to for `host`: resolved now, every one allowed, else AddressRefused.
    One refused address refuses the name: a resolver may hand them out in any order."""
    literal = _literal(host)
    try:
        found = [str(literal)] if literal is not None else await lookup(host, port)
    except OSError:
        raise AddressRefused(f"its host {host!r} does not resolve") from None
    if not found:
        raise AddressRefused(f"its host {host!r} does not resolve")
    if not allow_private:
        for text in found:
            why = refusal(ipaddress.ip_address(text))
            if why is not None:
                raise AddressRefused(f"its host {host!r} is {why}, which this gateway does not connect to")
    return found


async def check_url(url: str, allow_private: bool) -> None:
    """Registration's check: the URL's form, and its host's addresses as they resolve now."""
    _, host, port = split_url(url)
    await checked_addresses(host, port, allow_private)


class PinnedResolver(AbstractResolver):
    """aiohttp's resolver for the custom endpoints' session: each connection's one lookup, checked, is the
    address it connects to. aiohttp skips the resolver for an IP literal, which the adapter checks itself
    (`checked_addresses` before each call), so every connection passes the same policy."""

    def __init__(self, allow_private: bool) -> None:
        self._allow_private = allow_private

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        try:
            found = await checked_addresses(host, port, self._allow_private)
        except AddressRefused as exc:
            raise OSError(exc.reason) from None
        return [_result(host, text, port) for text in found]

    async def close(self) -> None:
        return None


def _result(host: str, text: str, port: int) -> ResolveResult:
    family = socket.AF_INET6 if ":" in text else socket.AF_INET
    return ResolveResult(hostname=host, host=text, port=port, family=family, proto=0, flags=socket.AI_NUMERICHOST)
