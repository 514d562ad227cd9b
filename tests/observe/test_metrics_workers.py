"""`/metrics` under `inferplex serve --workers 2` reports the whole server, from either worker and from the
separate listener: counts exact and identical, gauges of in-flight load summed, per-deployment state and build
info once, and the counts kept when a worker is killed and restarted.

Real processes: the supervisor and its workers (tests/serving/conftest.py's `Served`), the openai SDK for the
traffic. Each request and scrape goes over a connection pinned to a known worker (a keep-alive connection
stays with the worker that accepted it, and `/health/ready` says whose pid that is), so the test knows which
worker served what and which one answered each scrape.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway_server import free_port
from tests.serving.conftest import MASTER_KEY, Served, config
from tests.serving.upstream import PacedUpstream

CHAT = "/v1/chat/completions"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def upstream() -> Iterator[PacedUpstream]:
    fake = PacedUpstream().start()
    yield fake
    fake.stop()


@pytest.fixture
def server(tmp_path: Path, upstream: PacedUpstream) -> Iterator[tuple[Served, int]]:
    listen = free_port()
    cfg: dict[str, Any] = config(upstream, tmp_path / "data", models=("ok", "paced-2"))
    cfg["observability"] = {"metrics": {"listen": f"127.0.0.1:{listen}"}}
    served = Served(tmp_path, cfg, 2)
    try:
        served.wait_ready()
        yield served, listen
    finally:
        served.kill()


def workers(served: Served, want: int = 2, exclude: frozenset[int] = frozenset()) -> list[int]:
    """The pids of `want` distinct workers answering new connections."""
    found = served.worker_pids(want)
    assert len(found) == want and not found & exclude, found
    return sorted(found)


@contextlib.contextmanager
def on(served: Served, pid: int) -> Iterator[httpx.Client]:
    """A keep-alive connection to worker `pid` (new connections until that worker accepts one); used at once,
    before the server's keep-alive timeout closes it."""
    for _ in range(400):
        client = httpx.Client(base_url=served.url, timeout=30, headers={"Authorization": f"Bearer {MASTER_KEY}"})
        if client.get("/health/ready").json()["pid"] == pid:
            try:
                yield client
            finally:
                client.close()
            return
        client.close()
    raise AssertionError(f"worker {pid} never answered")


def scrape(client: httpx.Client, path: str = "/metrics") -> Samples:
    """The server's samples, without the scrapes' own footprint (the /metrics and /health/ready requests, the
    breakers read for each scrape) and the process_* / python_* series that change by themselves (only
    each worker's start time is kept)."""
    resp = client.get(path)
    assert resp.status_code == 200, resp.text
    out: Samples = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            if sample.name.startswith(("process_", "python_", "inferplex_store_")):
                if sample.name != "process_start_time_seconds":
                    continue
            if sample.labels.get("route") not in (None, CHAT):
                continue
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def processes(samples: Samples) -> set[int]:
    """The pids of the workers whose process_* series the scrape carries (each labelled with its own)."""
    return {int(dict(ls)["pid"]) for (n, ls) in samples if n == "process_start_time_seconds"}


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items())


def scrape_on(served: Served, pid: int) -> Samples:
    with on(served, pid) as client:
        return scrape(client)


def traffic(served: Served, pid: int, buffered: int, streams: int) -> tuple[int, int]:
    """Buffered answers, streams and one 401 served by worker `pid`; the input and output tokens charged."""
    with on(served, pid) as client:
        return _traffic(client, buffered, streams)


def _traffic(client: httpx.Client, buffered: int, streams: int) -> tuple[int, int]:
    sdk = openai.OpenAI(
        base_url=f"{str(client.base_url).rstrip('/')}/v1", api_key=MASTER_KEY, http_client=client, max_retries=0
    )
    tokens_in = tokens_out = 0
    for _ in range(buffered):
        answer = sdk.chat.completions.create(model="ok", messages=[{"role": "user", "content": "hi"}])
        assert answer.usage is not None
        tokens_in, tokens_out = tokens_in + answer.usage.prompt_tokens, tokens_out + answer.usage.completion_tokens
    for _ in range(streams):
        chunks = sdk.chat.completions.create(
            model="paced-2",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in chunks:
            if chunk.usage is not None:
                tokens_in += chunk.usage.prompt_tokens
                tokens_out += chunk.usage.completion_tokens
    stranger = openai.OpenAI(
        base_url=f"{str(client.base_url).rstrip('/')}/v1", api_key="ipx-wrong", http_client=client, max_retries=0
    )
    with pytest.raises(openai.AuthenticationError):
        stranger.chat.completions.create(model="ok", messages=[{"role": "user", "content": "hi"}])
    return tokens_in, tokens_out


def check_server_counts(samples: Samples, ok: int, unauthorized: int, tokens: tuple[int, int]) -> None:
    assert total(samples, "inferplex_requests_total", route=CHAT, status="200") == ok
    assert total(samples, "inferplex_requests_total", route=CHAT, status="401") == unauthorized
    assert total(samples, "inferplex_request_duration_seconds_count", route=CHAT) == ok + unauthorized
    assert total(samples, "inferplex_upstream_attempts_total", outcome="ok") == ok
    assert total(samples, "gen_ai_server_request_duration_seconds_count", error_type="") == ok
    assert total(samples, "inferplex_tokens_total", token_type="input") == tokens[0]
    assert total(samples, "inferplex_tokens_total", token_type="output") == tokens[1]
    assert total(samples, "gen_ai_client_token_usage_sum", gen_ai_token_type="output") == tokens[1]
    # once per server, not once per worker
    assert [k for k in samples if k[0] == "inferplex_build_info"] and total(samples, "inferplex_build_info") == 1
    assert total(samples, "inferplex_breaker_state") == 0  # two deployments, both closed: one row each
    assert len([k for k in samples if k[0] == "inferplex_breaker_state"]) == 2
    assert total(samples, "inferplex_deployment_in_flight") == 0


def test_every_worker_and_the_listener_report_the_whole_server(server: tuple[Served, int]) -> None:
    served, listen = server
    a, b = workers(served)
    in_a, out_a = traffic(served, a, buffered=3, streams=1)
    in_b, out_b = traffic(served, b, buffered=1, streams=2)
    tokens = (in_a + in_b, out_a + out_b)

    seen = [scrape_on(served, a), scrape_on(served, b), scrape_on(served, a), scrape_on(served, b)]
    for samples in seen:
        check_server_counts(samples, ok=7, unauthorized=2, tokens=tokens)
        assert total(samples, "inferplex_active_requests") == 1  # the scrape itself, on one worker of two
        assert processes(samples) == {a, b}
    assert seen[0] == seen[1] == seen[2] == seen[3]  # the same numbers, whichever worker answered
    with httpx.Client(timeout=30) as plain:  # worker 0's listener: not a request, so nothing active
        listener = scrape(plain, path=f"http://127.0.0.1:{listen}/metrics")
    check_server_counts(listener, ok=7, unauthorized=2, tokens=tokens)
    assert total(listener, "inferplex_active_requests") == 0
    assert {k: v for k, v in listener.items() if k[0] != "inferplex_active_requests"} == {
        k: v for k, v in seen[0].items() if k[0] != "inferplex_active_requests"
    }

    # a stream in flight on one worker is seen from the other
    with on(served, a) as on_a, on(served, b) as on_b:
        sdk = openai.OpenAI(base_url=f"{served.url}/v1", api_key=MASTER_KEY, http_client=on_a, max_retries=0)
        stream = sdk.chat.completions.create(model="paced-2", messages=[{"role": "user", "content": "hi"}], stream=True)
        next(iter(stream))
        during = scrape(on_b)
        for _ in stream:
            pass
    assert total(during, "inferplex_active_streams") == 1
    assert total(during, "inferplex_active_requests") == 2
    assert total(during, "inferplex_deployment_in_flight") == 1


def test_counts_survive_a_worker_killed_and_restarted(server: tuple[Served, int]) -> None:
    served, _ = server
    a, b = workers(served)
    in_a, out_a = traffic(served, a, buffered=2, streams=1)
    in_b, out_b = traffic(served, b, buffered=2, streams=1)
    tokens = (in_a + in_b, out_a + out_b)
    before = scrape_on(served, a)
    check_server_counts(before, ok=6, unauthorized=2, tokens=tokens)

    os.kill(b, signal.SIGKILL)
    served.wait_log("restarted")
    served.wait_ready()
    pids = workers(served, exclude=frozenset({b}))
    assert a in pids
    (c,) = set(pids) - {a}
    for pid in pids:
        after = scrape_on(served, pid)
        for key, value in before.items():
            if key[0].startswith(("inferplex_requests", "inferplex_tokens", "gen_ai_", "inferplex_upstream")):
                assert after.get(key, 0) >= value, key
        check_server_counts(after, ok=6, unauthorized=2, tokens=tokens)
        assert processes(after) == {a, c}  # the dead worker's counts stay, its process series do not

    # the new worker counts on from there, and the dead one's share is still in
    in_c, out_c = traffic(served, c, buffered=1, streams=0)
    for pid in pids:
        check_server_counts(
            scrape_on(served, pid), ok=7, unauthorized=3, tokens=(in_a + in_b + in_c, out_a + out_b + out_c)
        )


def test_counts_survive_a_reload(server: tuple[Served, int]) -> None:
    """SIGHUP: a new set of workers, the old ones drained and gone; their counts stay in the server's, and the
    new worker 0 serves the metrics listener (it binds the port while the old one still drains)."""
    served, listen = server
    old = workers(served)
    tokens = (0, 0)
    for pid in old:
        got = traffic(served, pid, buffered=1, streams=1)
        tokens = (tokens[0] + got[0], tokens[1] + got[1])
    served.signal(signal.SIGHUP)
    served.wait_log("new workers serving")
    deadline = time.monotonic() + 60
    while served.log().count("exited with code 0") < 2:
        assert time.monotonic() < deadline, served.log()
        time.sleep(0.1)
    new = workers(served, exclude=frozenset(old))
    for pid in new:
        samples = scrape_on(served, pid)
        check_server_counts(samples, ok=4, unauthorized=2, tokens=tokens)
        assert processes(samples) == set(new)
    with httpx.Client(timeout=30) as plain:
        listener = scrape(plain, path=f"http://127.0.0.1:{listen}/metrics")
    check_server_counts(listener, ok=4, unauthorized=2, tokens=tokens)
    assert processes(listener) == set(new)
