"""Inferada's rate-limit rules through HTTP: each metric and period, per-request caps, the levels (model,
account, key, end user), the refusals in each dialect's shape (Inferada's own 429 body on a request carrying
its extension), the admin API's validation, and the migration on SQLite and PostgreSQL.

The fake upstream answers `echo: <words>` cut at `max_tokens`, and reports one prompt token per word: a
prompt of five words with `max_tokens: 2` uses exactly 5 prompt and 2 completion tokens, so what a window
holds after n requests is known to the token. The gateway's admission estimate of that prompt is far larger
(`estimate_prompt_tokens`); a window corrected at settlement counts the real usage, not the estimate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from inferplex.canonical import ChatRequest
from inferplex.families.chat import estimate_prompt_tokens
from inferplex.limits import memory as memory_limits
from tests.accounts import test_replicas
from tests.accounts.conftest import Admin, billing_config
from tests.accounts.test_cli import cli, cli_json
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.migrating import down_and_up

PROMPT = "a b c d e"  # 5 prompt tokens at the fake; with max_tokens=2 the answer is "echo: a": 2 tokens
MESSAGES = [{"role": "user", "content": PROMPT}]
ESTIMATE = estimate_prompt_tokens(ChatRequest.model_validate({"model": "priced", "messages": MESSAGES}))
REPLICA_MASTER = test_replicas.MASTER
replicas = test_replicas.replicas  # the fixture: two gateway processes on one PostgreSQL and one Redis
PERIOD_S = {"minute": 60, "day": 86_400, "week": 604_800, "month": 2_592_000}
INFERADA_BODY_KEYS = {"type", "code", "request_id", "scope", "model_id", "level", "limit", "current", "requested"}


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    config = billing_config(fake_openai, tmp_path_factory.mktemp("rules"))
    config["models"].append(
        {
            "name": "model-capped",
            "deployments": [{"provider": "fake", "model": "gpt-echo"}],
            "pricing": {"input": "0", "output": "3"},
            "limit_rules": [{"metric": "requests", "period": "day", "max": 3}],
        }
    )
    with GatewayServer(config) as gw:
        yield gw


def rule(metric: str, period: str, max_: int, per_request: bool = False) -> dict[str, Any]:
    return {"metric": metric, "period": period, "max": max_, "per_request": per_request}


def chat(server: GatewayServer, key: str, model: str = "priced", **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": MESSAGES, "max_tokens": 2, **extra}
    return httpx.post(
        server.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def statuses(server: GatewayServer, key: str, n: int, **extra: Any) -> list[int]:
    return [chat(server, key, **extra).status_code for _ in range(n)]


# ---- each metric counts what was used -------------------------------------------------------------------------

# (metric, max): each admits exactly 4 requests of 5 prompt + 2 completion tokens, then refuses. A token rule
# admits while (what it holds) + (this request's admission charge) fits: the estimate for tokens and
# prompt_tokens, one token for completion_tokens. Had a window kept the estimate instead of the real usage,
# it would refuse far sooner.
METRICS = [
    ("tokens", 3 * 7 + ESTIMATE),
    ("prompt_tokens", 3 * 5 + ESTIMATE),
    ("completion_tokens", 3 * 2 + 1),
    ("requests", 4),
]


@pytest.mark.parametrize("metric,max_", METRICS)
def test_each_metric_admits_exactly_what_its_window_holds(
    server: GatewayServer, admin: Admin, metric: str, max_: int
) -> None:
    key = admin.create_key(credits_micros=10**6, limit_rules=[rule(metric, "day", max_)])["key"]
    assert statuses(server, key, 4) == [200] * 4
    refused = chat(server, key)
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert f"key: {max_} {metric.replace('_', ' ')} per day" in refused.json()["error"]["message"]
    assert int(refused.headers["retry-after"]) >= 1


def test_a_token_window_counts_the_real_usage_not_the_estimate(server: GatewayServer, admin: Admin) -> None:
    """Inferada's 429 body says what the window holds: the 4 requests' real 28 tokens, not 4 estimates."""
    key = admin.create_key(credits_micros=10**6, limit_rules=[rule("tokens", "day", 3 * 7 + ESTIMATE)])["key"]
    assert statuses(server, key, 4) == [200] * 4
    refused = chat(server, key, inferada={"processors": []}, stream=False)
    assert refused.status_code == 429
    body = refused.json()
    assert (body["current"], body["requested"]) == (4 * 7, ESTIMATE)


def test_a_failed_request_gives_its_tokens_back(server: GatewayServer, admin: Admin) -> None:
    """A call the upstream refuses used nothing: its admission estimate leaves the window again."""
    key = admin.create_key(credits_micros=10**6, limit_rules=[rule("tokens", "day", ESTIMATE)])["key"]
    for _ in range(3):
        assert chat(server, key, model="error-400").status_code == 400
    assert chat(server, key).status_code == 200


# ---- each period -------------------------------------------------------------------------------------------------


class MovedClock:
    """`time` as the in-memory limit store sees it, with `monotonic` moved forward by `offset` seconds."""

    def __init__(self) -> None:
        self.offset = 0.0

    def monotonic(self) -> float:
        return time.monotonic() + self.offset


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> MovedClock:
    moved = MovedClock()
    monkeypatch.setattr(memory_limits, "time", moved)
    return moved


@pytest.mark.parametrize("period", sorted(PERIOD_S))
def test_each_period_is_a_rolling_window(server: GatewayServer, admin: Admin, clock: MovedClock, period: str) -> None:
    """Two requests per period: the third waits until the first one's sub-window leaves the window (within
    1/60 of the period of a full period), and is admitted once that time has passed; half a period later
    there is no room yet (a refilling bucket would have had one)."""
    key = admin.create_key(credits_micros=10**6, limit_rules=[rule("requests", period, 2)])["key"]
    assert statuses(server, key, 2) == [200, 200]
    refused = chat(server, key)
    assert refused.status_code == 429
    wait = int(refused.headers["retry-after"])
    assert PERIOD_S[period] * 59 / 60 - 1 <= wait <= PERIOD_S[period] + 1
    clock.offset += PERIOD_S[period] / 2
    assert chat(server, key).status_code == 429
    clock.offset += PERIOD_S[period] / 2 + 1
    assert statuses(server, key, 3) == [200, 200, 429]


def test_a_day_window_holds_its_max_over_the_whole_day(server: GatewayServer, admin: Admin, clock: MovedClock) -> None:
    """10 a day, one every two hours: the 11th and 12th (20 h and 22 h after the first) are refused, as the
    window still holds 10; the 13th, a day after the first, finds its room back."""
    key = admin.create_key(credits_micros=10**6, limit_rules=[rule("requests", "day", 10)])["key"]
    codes = []
    for _ in range(13):
        codes.append(chat(server, key).status_code)
        clock.offset += 7200
    assert codes == [200] * 10 + [429, 429, 200]


def test_a_burst_admits_exactly_the_max(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(credits_micros=10**6, limit_rules=[rule("requests", "minute", 20)])["key"]

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=30) as client:
            calls = [
                client.post(
                    server.url + "/v1/chat/completions",
                    json={"model": "priced", "messages": MESSAGES, "max_tokens": 2},
                    headers={"Authorization": f"Bearer {key}"},
                )
                for _ in range(25)
            ]
            return [r.status_code for r in await asyncio.gather(*calls)]

    codes = asyncio.run(burst())
    assert (codes.count(200), codes.count(429)) == (20, 5)


# ---- per-request caps ------------------------------------------------------------------------------------------


def test_a_per_request_cap_refuses_the_worst_case_before_any_call_and_charges_nothing(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI
) -> None:
    cap = rule("tokens", "day", ESTIMATE + 10, per_request=True)
    created = admin.create_key(credits_micros=10**6, limit_rules=[cap])
    calls = len(fake_openai.state.requests)
    before = admin.account(created["account_id"])["balance_micros"]
    refused = chat(server, created["key"], max_tokens=11)  # worst case: the estimate and 11 tokens
    assert refused.status_code == 429, refused.text
    assert "retry-after" not in refused.headers  # no wait would admit it
    assert f"up to {ESTIMATE + 11} tokens" in refused.json()["error"]["message"]
    assert len(fake_openai.state.requests) == calls
    assert admin.account(created["account_id"])["balance_micros"] == before
    assert admin.ledger(created["account_id"])[-1]["kind"] == "topup"
    assert chat(server, created["key"], max_tokens=10).status_code == 200
    inferada = chat(server, created["key"], max_tokens=11, inferada={"processors": []})
    assert inferada.json()["limit"] == cap and inferada.json()["requested"] == ESTIMATE + 11


@pytest.mark.parametrize(
    "metric,max_tokens,ok", [("prompt_tokens", 500, ESTIMATE), ("completion_tokens", 9, 9), ("requests", 500, 1)]
)
def test_per_request_caps_of_each_metric(
    server: GatewayServer, admin: Admin, metric: str, max_tokens: int, ok: int
) -> None:
    key = admin.create_key(credits_micros=10**6, limit_rules=[rule(metric, "minute", ok, per_request=True)])["key"]
    assert chat(server, key, max_tokens=max_tokens).status_code == 200
    if metric != "requests":
        lower = admin.create_key(credits_micros=10**6, limit_rules=[rule(metric, "minute", ok - 1, True)])["key"]
        assert chat(server, lower, max_tokens=max_tokens).status_code == 429


# ---- refusals in each dialect's shape ------------------------------------------------------------------------


def test_an_inferada_request_gets_inferadas_429_body(server: GatewayServer, admin: Admin) -> None:
    limit = rule("requests", "day", 1)
    key = admin.create_key(credits_micros=10**6, limit_rules=[limit])["key"]
    assert chat(server, key, inferada={"processors": []}, stream=False).status_code == 200
    refused = chat(server, key, inferada={"processors": []})  # stream omitted: Inferada's default, still JSON 429
    assert refused.status_code == 429
    assert refused.headers["content-type"].startswith("application/json")
    body = refused.json()
    assert set(body) == INFERADA_BODY_KEYS
    assert body["type"] == "limit_exceeded" and body["code"] == 429
    assert body["request_id"] == refused.headers["x-request-id"]
    assert (body["scope"], body["model_id"], body["level"]) == ("completions", "priced", "token")
    assert body["limit"] == limit and (body["current"], body["requested"]) == (1, 1)
    assert 86_400 - 1_440 - 1 <= int(refused.headers["retry-after"]) <= 86_401


def test_other_requests_get_their_dialects_429(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(credits_micros=10**6, limit_rules=[rule("requests", "day", 1)])["key"]
    assert chat(server, key).status_code == 200
    openai = chat(server, key)
    assert openai.status_code == 429
    assert openai.json()["error"]["type"] == "rate_limit_error"
    anthropic = httpx.post(
        server.url + "/v1/messages",
        json={"model": "priced", "max_tokens": 2, "messages": MESSAGES},
        headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        timeout=30,
    )
    assert anthropic.status_code == 429 and "retry-after" in anthropic.headers
    assert anthropic.json()["type"] == "error" and anthropic.json()["error"]["type"] == "rate_limit_error"


# ---- levels ----------------------------------------------------------------------------------------------------


def test_a_models_rules_count_every_caller(server: GatewayServer, admin: Admin) -> None:
    keys = [admin.create_key(credits_micros=10**6)["key"] for _ in range(2)]
    codes = [chat(server, keys[i % 2], model="model-capped").status_code for i in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    refused = chat(server, keys[0], model="model-capped", inferada={"processors": []}, stream=False)
    assert (refused.json()["level"], refused.json()["model_id"]) == ("model", "model-capped")
    assert chat(server, keys[0]).status_code == 200  # another model is not limited by it


def test_an_accounts_rules_count_all_its_keys(server: GatewayServer, admin: Admin) -> None:
    account = admin.client.post(
        "/admin/accounts", json={"name": "org", "credits_micros": 10**6, "limit_rules": [rule("requests", "week", 3)]}
    ).json()
    assert account["limit_rules"] == [rule("requests", "week", 3)]
    keys = [admin.create_key(account_id=account["id"])["key"] for _ in range(2)]
    assert [chat(server, keys[i % 2]).status_code for i in range(4)] == [200, 200, 200, 429]
    refused = chat(server, keys[1], inferada={"processors": []}, stream=False)
    assert refused.json()["level"] == "organisation"
    # Changing the account's rules reaches its keys at once (their cached records are dropped).
    changed = admin.client.patch(f"/admin/accounts/{account['id']}", json={"limit_rules": None})
    assert changed.status_code == 200 and changed.json()["limit_rules"] == []
    assert chat(server, keys[0]).status_code == 200


def test_a_keys_user_rules_count_each_end_user(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=10**6, user_limit_rules=[rule("requests", "day", 2)])
    key = created["key"]
    assert created["user_limit_rules"] == [rule("requests", "day", 2)]
    assert statuses(server, key, 3, user="alice") == [200, 200, 429]
    refused = chat(server, key, user="alice", inferada={"processors": []}, stream=False)
    assert refused.json()["level"] == "user"
    assert statuses(server, key, 2, user="bob") == [200, 200]
    assert statuses(server, key, 3) == [200] * 3  # a request naming no user is not counted per user


def test_rules_changed_on_a_key_apply_to_its_next_request(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=10**6)
    assert chat(server, created["key"]).status_code == 200
    patched = admin.client.patch(f"/admin/keys/{created['id']}", json={"limit_rules": [rule("requests", "day", 1)]})
    assert patched.status_code == 200 and patched.json()["limit_rules"] == [rule("requests", "day", 1)]
    assert statuses(server, created["key"], 2) == [200, 429]
    cleared = admin.client.patch(f"/admin/keys/{created['id']}", json={"limit_rules": []})
    assert cleared.status_code == 200
    assert chat(server, created["key"]).status_code == 200


def test_rpm_and_tpm_stay_as_they_were_beside_rules(server: GatewayServer, admin: Admin) -> None:
    key = admin.create_key(credits_micros=10**6, rpm=2, limit_rules=[rule("requests", "day", 5)])["key"]
    assert statuses(server, key, 2) == [200, 200]
    refused = chat(server, key)
    assert refused.status_code == 429 and "key: 2 requests per minute" in refused.json()["error"]["message"]


# ---- the admin API refuses a bad rule, naming the field ----------------------------------------------------------


@pytest.mark.parametrize(
    "rules,named",
    [
        ([{"metric": "bytes", "period": "day", "max": 1}], "limit_rules.0.metric"),
        ([{"metric": "tokens", "period": "year", "max": 1}], "limit_rules.0.period"),
        ([{"metric": "tokens", "period": "day", "max": 0}], "limit_rules.0.max"),
        ([{"metric": "tokens", "period": "day", "max": 2**63}], "limit_rules.0.max"),
        ([{"metric": "tokens", "period": "day"}], "limit_rules.0.max"),
        ([rule("tokens", "day", 1), {**rule("tokens", "day", 1), "scope": "x"}], "limit_rules.1.scope"),
        ("tokens:day:1", "limit_rules"),
    ],
)
def test_a_bad_rule_is_a_400_naming_the_field(admin: Admin, rules: Any, named: str) -> None:
    for path, body in [("/admin/keys", {"name": "x"}), ("/admin/accounts", {"name": "x"})]:
        r = admin.client.post(path, json={**body, "limit_rules": rules})
        assert r.status_code == 400, r.text
        assert named in (r.json()["error"]["param"] or "") + r.json()["error"]["message"]
    r = admin.client.post("/admin/keys", json={"name": "x", "user_limit_rules": rules})
    assert r.status_code == 400 and "user_" + named in (r.json()["error"]["param"] or "") + r.json()["error"]["message"]


def test_the_audio_metrics_are_kept_and_shown(admin: Admin) -> None:
    """Their effect (a speech or transcription request over the rule is refused) is in tests/media/audio."""
    rules = [rule("characters_synthesised", "day", 5), rule("audio_duration_seconds", "minute", 60)]
    r = admin.client.post("/admin/keys", json={"name": "x", "limit_rules": rules})
    assert r.status_code in (200, 201), r.text
    assert r.json()["limit_rules"] == rules


def test_rules_from_the_cli(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(billing_config(fake_openai, tmp_path)))
    conf = ("--config", str(path))
    rules = ("--rule", "requests:day:10", "--rule", "tokens:minute:500:per_request", "--user-rule", "requests:week:3")
    created = cli_json("keys", "create", "--name", "ruled", *rules, *conf)
    assert created["limit_rules"] == [rule("requests", "day", 10), rule("tokens", "minute", 500, True)]
    assert created["user_limit_rules"] == [rule("requests", "week", 3)]
    for bad, named in [("requests:year:1", "limit_rules.0.period"), ("requests-day-1", "limit_rules.0")]:
        out = cli("keys", "create", "--name", "x", "--rule", bad, *conf)
        assert out.returncode == 2 and named in out.stderr and "Traceback" not in out.stderr


# ---- the migration --------------------------------------------------------------------------------------------


def _columns(url: str) -> list[dict[str, set[str]]]:
    """The rule columns after upgrade, downgrade to 0008, and upgrade again."""

    def look(found: Any) -> dict[str, set[str]]:
        return {
            table: {c["name"] for c in found.get_columns(table) if "limit_rules" in c["name"]}
            for table in ("accounts", "api_keys")
        }

    return down_and_up(url, "0008", look)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_the_migration_upgrades_and_downgrades(engine: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}" if engine == "sqlite" else request.getfixturevalue("pg_url")
    full = {"accounts": {"limit_rules"}, "api_keys": {"limit_rules", "user_limit_rules"}}
    assert _columns(url) == [full, {"accounts": set(), "api_keys": set()}, full]


# ---- two gateway processes sharing PostgreSQL and Redis ----------------------------------------------------------


async def _burst(calls: list[tuple[str, str, dict[str, Any]]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=100)) as client:
        return await asyncio.gather(
            *(
                client.post(
                    url + "/v1/chat/completions",
                    json={"model": "priced", "messages": MESSAGES, "max_tokens": 2, **extra},
                    headers={"Authorization": f"Bearer {key}"},
                )
                for url, key, extra in calls
            )
        )


def test_a_day_window_admits_exactly_its_max_across_two_replicas(replicas: list[str]) -> None:
    admin = Admin(replicas[0], REPLICA_MASTER)
    created = admin.create_key(credits_micros=10**6, limit_rules=[rule("requests", "day", 10)])
    responses = asyncio.run(_burst([(replicas[i % 2], created["key"], {}) for i in range(40)]))
    assert [r.status_code for r in responses].count(200) == 10
    assert [r.status_code for r in responses].count(429) == 30
    # Only the 10 admitted were charged (6 micro-USD each: 2 output tokens of `priced`).
    assert admin.account(created["account_id"])["balance_micros"] == 10**6 - 10 * 6
    admin.close()


def test_a_token_window_is_corrected_to_the_real_usage_across_replicas(replicas: list[str]) -> None:
    """Admitted on one replica, settled into Redis, and read by the other: 4 requests fit, as on one."""
    admin = Admin(replicas[1], REPLICA_MASTER)
    key = admin.create_key(credits_micros=10**6, limit_rules=[rule("tokens", "day", 3 * 7 + ESTIMATE)])["key"]
    admin.close()
    codes = []
    for i in range(5):
        codes += [r.status_code for r in asyncio.run(_burst([(replicas[i % 2], key, {})]))]
    assert codes == [200, 200, 200, 200, 429]


def test_a_per_request_cap_under_concurrency_across_replicas(replicas: list[str]) -> None:
    """Half the calls may cost more than the cap: exactly those are refused, and none of them is charged."""
    admin = Admin(replicas[0], REPLICA_MASTER)
    cap = rule("completion_tokens", "day", 2, per_request=True)
    created = admin.create_key(credits_micros=10**6, limit_rules=[cap])
    calls = [(replicas[i % 2], created["key"], {"max_tokens": 2 if i % 4 < 2 else 3}) for i in range(40)]
    responses = asyncio.run(_burst(calls))
    assert [r.status_code for r in responses] == [200 if i % 4 < 2 else 429 for i in range(40)]
    entries = admin.ledger(created["account_id"])
    assert [e["kind"] for e in entries].count("reserve") == 20
    assert admin.account(created["account_id"])["balance_micros"] == 10**6 - 20 * 6
    admin.close()
