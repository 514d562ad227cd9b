"""Background responses when their gateway stops (a graceful shutdown, not a crash: test_replicas_crash.py):
the run fails at once, charged and recorded for what it produced, and its stored stream ends with a
`response.failed` that says so; the next gateway on the same database serves it as it was left."""

from __future__ import annotations

import time
from pathlib import Path

import openai
import pytest

from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.responses_api.conftest import stored_row


def test_a_stopping_gateway_fails_its_runs_charged_for_what_they_produced(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    config = billing_config(fake_openai, tmp_path, responses={"tick_s": 0.1, "follow_poll_s": 0.02})
    url = config["storage"]["database_url"]
    gateway = GatewayServer(config).start()
    try:
        admin = Admin(gateway.url, gateway.master_key)
        created = admin.create_key(scopes=["chat"], credits_micros=10**7)
        with openai.OpenAI(base_url=gateway.base_url, api_key=created["key"], max_retries=0) as client:
            queued = client.responses.create(model="slow-stream", input="long", background=True)
            with client.responses.retrieve(queued.id, stream=True) as events:
                deltas = 0
                for event in events:
                    deltas += event.type == "response.output_text.delta"
                    if deltas == 3:
                        break
        admin.close()
    finally:
        gateway.stop()
    row = stored_row(url, queued.id)
    assert row is not None and row.status == "failed" and row.cost_micros
    error = row.response["error"]
    assert f"charged {row.cost_micros} micro-USD" in error["message"]
    with GatewayServer(config) as again:
        with openai.OpenAI(base_url=again.base_url, api_key=created["key"], max_retries=0) as client:
            stored = client.responses.retrieve(queued.id)
            assert stored.status == "failed"
            replayed = list(client.responses.retrieve(queued.id, stream=True))
            assert replayed[-1].type == "response.failed"
            assert [e.sequence_number for e in replayed] == list(range(len(replayed)))
        admin = Admin(again.url, again.master_key)
        deadline = time.monotonic() + 5
        while admin.account(created["account_id"])["balance_micros"] != 10**7 - row.cost_micros:
            assert time.monotonic() < deadline, "the ledger's charge is not the recorded cost"
            time.sleep(0.05)
        admin.close()


@pytest.fixture(autouse=True)
def _quiet_fake_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("CRITICAL", logger="aiohttp.server")  # the fake notices the gateway hanging up


def test_a_run_over_its_key_s_rate_limit_waits_queued(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    """The gateway's own 429 before any upstream call queues the run again after the wait it names, instead
    of failing it: with `rpm: 1`, the second run waits for the next minute."""
    config = billing_config(fake_openai, tmp_path, responses={"tick_s": 0.1})
    with GatewayServer(config) as gateway:
        admin = Admin(gateway.url, gateway.master_key)
        key = admin.create_key(scopes=["chat"], credits_micros=10**6, rpm=1)["key"]
        admin.close()
        with openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0) as client:
            first = client.responses.create(model="echo-model", input="first", background=True)
            second = client.responses.create(model="echo-model", input="second", background=True)
            deadline = time.monotonic() + 10
            while (row := stored_row(config["storage"]["database_url"], second.id)) is None or row.attempts < 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(0.5)
            ran = {
                r.id: r for r in (stored_row(config["storage"]["database_url"], i) for i in (first.id, second.id)) if r
            }
        statuses = sorted(r.status for r in ran.values())
        assert statuses == ["completed", "queued"], statuses
        waiting = next(r for r in ran.values() if r.status == "queued")
        assert waiting.next_run_at is not None and waiting.next_run_at > time.time() + 1
        assert waiting.claimed_by is None and waiting.attempts == 1
