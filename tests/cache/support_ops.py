"""What the operator-facing cache tests share (H4: tests/cache/test_admin*, test_usage*, test_metrics*, and
tests/console/test_cache_page*): a gateway config with the cache on, an operator's admin client, and the fake
upstream's calls for one prompt (each test sends prompts of its own, so the session's shared fake tells
exactly how many of its requests reached the upstream)."""

from __future__ import annotations

import secrets
import time
from typing import Any

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer


def cached_config(fake: FakeOpenAI, **cache: Any) -> dict[str, Any]:
    """The shared test config with the response cache on, in memory (what the other backends add is tested
    by their own suites), and the metrics served on the gateway's port."""
    config = openai_config(fake)
    config["cache"] = {"enabled": True, "backend": "memory", **cache}
    config["observability"] = {"metrics": {"enabled": True}}
    return config


def prompt(label: str = "cache") -> str:
    """A prompt no other test sends."""
    return f"{label} {secrets.token_hex(6)}"


def upstream_calls(fake: FakeOpenAI, text: str) -> int:
    """How many chat requests holding `text` reached the fake upstream."""
    return sum(1 for r in fake.state.requests if r.path.endswith("/chat/completions") and text in str(r.body))


def usage_row(request_id: str, **values: Any) -> dict[str, Any]:
    """A usage row as the guard writes it (every column), `values` on top."""
    base: dict[str, Any] = {
        "request_id": request_id, "created_at": 1_764_000_000.0, "key_id": "k1", "account_id": "a1", "model": "m1",
        "provider": "fake", "deployment": "d1", "status": 200, "prompt_tokens": 3, "completion_tokens": 4,
        "cached_tokens": 0, "estimated": 0, "cost_micros": 12, "total_ms": 5.0, "upstream_ms": 4.0,
        "ttft_ms": None, "queued_ms": 0.0, "tags": ["t"], "end_user": None, "request_body": None,
        "response_body": None, "route": "/v1/chat/completions", "operation": "chat", "error_type": None,
        "attempts": [], "attempt_errors": 0, "cache": None,
    }  # fmt: skip
    return {**base, **values}


def client(gateway: GatewayServer, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key or gateway.master_key, max_retries=0)


def ask(
    gateway: GatewayServer, text: str, *, key: str | None = None, model: str = "echo-model", **extra: Any
) -> tuple[str, httpx.Headers]:
    """One chat completion through the official SDK: its answer's text and the response headers."""
    raw = client(gateway, key).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], **extra
    )
    answer = raw.parse().choices[0].message.content
    assert answer is not None
    return answer, raw.headers


class Operator:
    """The admin API as an operator's script calls it (the master key)."""

    def __init__(self, gateway: GatewayServer) -> None:
        self.http = httpx.Client(base_url=gateway.url, headers=gateway.auth, timeout=30)

    def close(self) -> None:
        self.http.close()

    def cache(self, **params: Any) -> dict[str, Any]:
        r = self.http.get("/admin/cache", params=params)
        assert r.status_code == 200, r.text
        found: dict[str, Any] = r.json()
        return found

    def purge(self, **body: Any) -> int:
        r = self.http.post("/admin/cache/purge", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["object"] == "cache.purge"
        purged: int = r.json()["purged"]
        return purged

    def request_row(self, request_id: str) -> dict[str, Any]:
        """The request's row in the request log (written a moment after the answer: asked until there)."""
        deadline = time.monotonic() + 10
        while True:
            r = self.http.get(f"/admin/requests/{request_id}")
            if r.status_code == 200 or time.monotonic() > deadline:
                assert r.status_code == 200, r.text
                row: dict[str, Any] = r.json()
                return row
            time.sleep(0.05)

    def requests(self, **params: Any) -> list[dict[str, Any]]:
        r = self.http.get("/admin/requests", params=params)
        assert r.status_code == 200, r.text
        rows: list[dict[str, Any]] = r.json()["data"]
        return rows

    def key(self, name: str, **body: Any) -> tuple[str, str, str]:
        """A new key with an account of its own, funded with $10: its id, its secret, its account's id."""
        r = self.http.post("/admin/keys", json={"name": name, "credits_micros": 10_000_000, **body})
        assert r.status_code == 201, r.text
        return r.json()["id"], r.json()["key"], r.json()["account_id"]


# ---- /metrics ----

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples_of(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def scrape(gateway: GatewayServer) -> Samples:
    """Every sample of the gateway's /metrics (scraped with the master key), by (name, labels)."""
    answer = httpx.get(gateway.url + "/metrics", headers=gateway.auth, timeout=10)
    assert answer.status_code == 200, answer.text
    return samples_of(answer.text)


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items())
