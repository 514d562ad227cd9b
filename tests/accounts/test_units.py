"""Pure decisions as tables: costs, token counts, client addresses, signed tokens."""

from __future__ import annotations

import asyncio
from decimal import Decimal

import pytest

from inferplex.accounts import tokens
from inferplex.accounts.auth import client_ip, parse_networks
from inferplex.accounts.pricing import Tokens, cost_micros, estimate_output_tokens, tokens_of
from inferplex.config import Pricing
from inferplex.store.key_cache import CountedKeyCache

P = Pricing(input=Decimal("0.15"), output=Decimal("0.60"), cached_input=Decimal("0.075"), cache_write=Decimal("0.3"))


@pytest.mark.parametrize(
    "price,tokens,micros",
    [
        (P, Tokens(), 0),
        (P, Tokens(prompt=1), 1),  # 0.15 rounds up to 1
        (P, Tokens(prompt=20), 3),  # 3.0 exactly
        (P, Tokens(prompt=21), 4),  # 3.15 -> 4
        (P, Tokens(prompt=1000, completion=1000), 750),
        (P, Tokens(prompt=1000, cached=400), 120),  # 600 x 0.15 + 400 x 0.075 = 90 + 30
        (P, Tokens(prompt=1000, cached=400, cache_write=100), 135),  # 500 x .15 + 400 x .075 + 100 x .3
        (P, Tokens(prompt=10, cached=50), 1),  # cached above prompt is clamped: 10 x 0.075 = 0.75 -> 1
        (Pricing(input=Decimal(1), output=Decimal(3)), Tokens(prompt=5, completion=2), 11),
        (Pricing(input=Decimal(5), free=True), Tokens(prompt=100, completion=100), 0),
        # A zero cache price is a price, not "unset": these cached and written tokens cost nothing.
        (
            Pricing(input=Decimal(3), output=Decimal(15), cached_input=Decimal(0), cache_write=Decimal(0)),
            Tokens(prompt=1000, completion=10, cached=100, cache_write=200),
            2250,
        ),
        # Prices whose denominators differ: 7 x 0.0000003 + 1 x 1.25 = 1.2500021 -> 2; one token less of
        # output is 0.0000021 -> 1 (never rounded down to 0).
        (Pricing(input=Decimal("0.0000003"), output=Decimal("1.25")), Tokens(prompt=7, completion=1), 2),
        (Pricing(input=Decimal("0.0000003"), output=Decimal("1.25")), Tokens(prompt=7), 1),
    ],
)
def test_cost_is_exact_then_rounded_up_once(price: Pricing, tokens: Tokens, micros: int) -> None:
    assert cost_micros(price, tokens) == micros


@pytest.mark.parametrize(
    "usage,expected",
    [
        (None, Tokens()),
        ({"prompt_tokens": 9, "completion_tokens": 2}, Tokens(9, 2)),
        ({"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}, Tokens(9, 2, 4)),
        ({"prompt_tokens": 9, "cache_read_input_tokens": 3, "cache_creation_input_tokens": 2}, Tokens(9, 0, 3, 2)),
        ({"prompt_tokens": "x", "completion_tokens": -1}, Tokens()),
    ],
)
def test_tokens_of_usage(usage: dict[str, object] | None, expected: Tokens) -> None:
    assert tokens_of(usage) == expected


@pytest.mark.parametrize("chars,tokens_", [(0, 0), (1, 1), (4, 1), (5, 2), (50, 13)])
def test_output_estimate_rounds_up(chars: int, tokens_: int) -> None:
    assert estimate_output_tokens(chars) == tokens_


TRUSTED = parse_networks(["10.0.0.0/8", "::1/128"])


@pytest.mark.parametrize(
    "peer,xff,expected",
    [
        ("203.0.113.5", None, "203.0.113.5"),
        ("203.0.113.5", "1.2.3.4", "203.0.113.5"),  # an untrusted peer cannot claim another address
        ("10.0.0.2", None, "10.0.0.2"),
        ("10.0.0.2", "1.2.3.4", "1.2.3.4"),
        ("10.0.0.2", "6.6.6.6, 1.2.3.4, 10.0.0.9", "1.2.3.4"),  # right-most untrusted hop; left is caller-made
        ("10.0.0.2", "10.0.0.7", "10.0.0.7"),
        ("::1", "2001:db8::1", "2001:db8::1"),
        (None, "1.2.3.4", None),
    ],
)
def test_client_ip_honours_forwarded_for_only_from_trusted_proxies(
    peer: str | None, xff: str | None, expected: str | None
) -> None:
    assert client_ip(peer, xff, TRUSTED) == expected


def test_tokens_round_trip_and_refuse_tampering_and_expiry() -> None:
    secret = b"s" * 32
    token = tokens.issue(secret, "key_1", frozenset({"chat"}), expires_at=2000, bound_to="b")
    claims = tokens.verify(secret, token, now=1000)
    assert claims == tokens.Claims("key_1", frozenset({"chat"}), 2000, "b")
    assert tokens.verify(secret, token, now=2000) is None
    assert tokens.verify(b"t" * 32, token, now=1000) is None
    body, _, sig = token.rpartition(".")
    forged = tokens.issue(b"x", "key_admin", frozenset({"admin"}), 9999, "b").rpartition(".")[0] + "." + sig
    assert tokens.verify(secret, forged, now=1000) is None
    for bad in ("", "ipxt.", "ipxt..", "ipx-abc", body):
        assert tokens.verify(secret, bad, now=1000) is None


async def test_the_sqlite_key_change_count_is_read_once_per_pass_of_the_loop() -> None:
    """Many lookups in one pass share one read; the next pass (after the loop polled for I/O) reads again,
    so a change made before that poll is seen, and a kept record of the old generation is not served."""
    reads: list[int] = []
    generation = [7]

    def read() -> int:
        reads.append(generation[0])
        return generation[0]

    cache = CountedKeyCache(read)
    assert [cache.now() for _ in range(3)] == [7, 7, 7] and len(reads) == 1
    assert cache.get("k", cache.now()) is None  # a lookup that missed, then keeps what it read
    cache.put("k", "record", 7)
    assert cache.get("k", cache.now()) == "record"
    generation[0] = 8
    await asyncio.sleep(0)
    assert cache.now() == 8 and len(reads) == 2
    assert cache.get("k", cache.now()) is None


@pytest.mark.parametrize(
    "args",
    [
        ["EVALSHA", "a" * 40, 2, "k:rate:key_1:rpm", "k:conc:key_1", 900.0, "A 1 1 1 60 60.0 5 req_1"],
        ["PING"],
        ["SET", "é-ключ", b"\x00\xffbytes", -3, 0.1, 1e20, ""],
    ],
)
def test_our_redis_command_encoding_is_redis_pys(args: list[object]) -> None:
    """The batched scripts encode their calls themselves: byte for byte what redis-py would send."""
    from redis.connection import Connection

    from inferplex.redis_script import pack

    assert pack(args) == b"".join(Connection().pack_command(*args))  # type: ignore[arg-type]
