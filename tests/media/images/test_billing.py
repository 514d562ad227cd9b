"""Image requests metered through the ledger with a keyed account: exact per-image charges by size and
quality, gpt-image's image tokens at the image rates, nothing for a failed call, reconciled under concurrency."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai

from tests.gateway_server import GatewayServer
from tests.media.images.conftest import Admin


def _client(gateway: GatewayServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0, timeout=30)


def test_per_image_price_by_size_and_quality(gateway: GatewayServer, admin: Admin) -> None:
    key = admin.key(credits_micros=1_000_000)
    with _client(gateway, key["key"]) as client:
        raw = client.images.with_raw_response.generate(
            model="dall-e-3", prompt="two herons", n=2, size="1024x1024", quality="hd", response_format="b64_json"
        )
    assert len(raw.parse().data) == 2
    assert raw.headers["x-inferplex-cost-micros"] == "160000"  # 2 x $0.08
    assert admin.balance(key["account_id"]) == 1_000_000 - 160_000


def test_gpt_image_tokens_are_billed_at_the_image_rates(gateway: GatewayServer, admin: Admin) -> None:
    key = admin.key(credits_micros=1_000_000)
    with _client(gateway, key["key"]) as client:
        result = client.images.generate(model="gpt-image-1", prompt="a kingfisher on a branch", quality="medium")
    usage = result.usage
    assert usage is not None and usage.output_tokens == 1056
    text = usage.input_tokens_details.text_tokens
    # $5/M text input, $40/M image output (the text output rate, $1/M, must not be used)
    expected = text * 5 + 1056 * 40
    assert admin.balance(key["account_id"]) == 1_000_000 - expected
    assert expected != text * 5 + 1056 * 1


def test_a_failed_call_costs_nothing_and_releases_its_reservation(gateway: GatewayServer, admin: Admin) -> None:
    key = admin.key(credits_micros=500_000)
    r = httpx.post(
        gateway.base_url + "/images/generations",
        json={"model": "broken-images", "prompt": "x", "n": 4},
        headers={"Authorization": f"Bearer {key['key']}"},
        timeout=30,
    )
    assert r.status_code >= 500
    assert admin.balance(key["account_id"]) == 500_000
    assert sum(e["amount_micros"] for e in admin.ledger(key["account_id"])) == 500_000


def test_concurrent_requests_reconcile(gateway: GatewayServer, admin: Admin) -> None:
    key = admin.key(credits_micros=1_000_000)

    async def burst() -> list[httpx.Response]:
        headers = {"Authorization": f"Bearer {key['key']}"}
        async with httpx.AsyncClient(timeout=60) as http:
            calls: list[Any] = []
            for i in range(12):
                model, extra = ("imagen", {}) if i % 3 == 0 else ("dall-e-2", {"size": "512x512"})
                body = {"model": model, "prompt": f"bird {i}", "n": 2, "response_format": "b64_json", **extra}
                calls.append(http.post(gateway.base_url + "/images/generations", json=body, headers=headers))
            return list(await asyncio.gather(*calls))

    responses = asyncio.run(burst())
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
    # 4 Imagen requests x 2 x $0.04 + 8 dall-e-2 requests x 2 x $0.018
    expected = 4 * 2 * 40_000 + 8 * 2 * 18_000
    assert sum(int(r.headers["x-inferplex-cost-micros"]) for r in responses) == expected
    assert admin.balance(key["account_id"]) == 1_000_000 - expected
    assert sum(e["amount_micros"] for e in admin.ledger(key["account_id"])) == 1_000_000 - expected


def test_gemini_image_tokens_are_billed_at_the_image_output_rate(gateway: GatewayServer, admin: Admin) -> None:
    key = admin.key(credits_micros=1_000_000)
    with _client(gateway, key["key"]) as client:
        raw = client.images.with_raw_response.generate(model="gemini-image", prompt="a tram in fog")
    assert raw.parse().usage.output_tokens == 1290  # type: ignore[union-attr]
    # 4 text tokens at $0.3/M + 1290 image tokens at $30/M = 38701.2 micro-USD, rounded up once
    assert raw.headers["x-inferplex-cost-micros"] == "38702"
    assert admin.balance(key["account_id"]) == 1_000_000 - 38702


def test_the_most_specific_image_price_wins(gateway: GatewayServer, admin: Admin) -> None:
    # titan: {"standard": 0.008, "hd": 0.01, "1024x1024/hd": 0.012}
    key = admin.key(credits_micros=1_000_000)
    with _client(gateway, key["key"]) as client:
        hd = client.images.with_raw_response.generate(model="titan", prompt="a", n=2, size="1024x1024", quality="hd")
        hd_small = client.images.with_raw_response.generate(model="titan", prompt="b", size="768x768", quality="hd")
        plain = client.images.with_raw_response.generate(model="titan", prompt="c", size="768x768", quality="standard")
    costs = [int(r.headers["x-inferplex-cost-micros"]) for r in (hd, hd_small, plain)]
    assert costs == [24_000, 10_000, 8_000]
    assert admin.balance(key["account_id"]) == 1_000_000 - sum(costs)


def test_a_streamed_generation_is_billed_on_its_usage(gateway: GatewayServer, admin: Admin) -> None:
    key = admin.key(credits_micros=1_000_000)
    with _client(gateway, key["key"]) as client:
        events = list(client.images.generate(model="gpt-image-1", prompt="a wren", stream=True, partial_images=1))
    usage = events[-1].usage  # type: ignore[union-attr]
    expected = usage.input_tokens_details.text_tokens * 5 + usage.output_tokens * 40
    assert usage.output_tokens == 1056 and admin.balance(key["account_id"]) == 1_000_000 - expected
