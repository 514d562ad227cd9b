"""A gateway process killed while it runs background responses: another replica on the same PostgreSQL takes
them over once their lease lapses. A run that had streamed nothing runs again from the start; one that had
streamed fails (its caller saw output that cannot be continued exactly) and is charged nothing."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import openai

from tests.accounts.conftest import Admin, pg_url  # noqa: F401
from tests.gateway_server import free_port, serve_command
from tests.replicas import _wait_until_up
from tests.responses_api.test_replicas import MASTER, _clients, config_path, env  # noqa: F401


@contextmanager
def _replica(path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    cmd = serve_command(path, port)
    proc = subprocess.Popen(cmd, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up([url], [proc])
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(15)


def _status(client: openai.OpenAI, response_id: str, wanted: tuple[str, ...], within: float) -> Any:
    deadline = time.monotonic() + within
    while True:
        response = client.responses.retrieve(response_id)
        if response.status in wanted:
            return response
        assert time.monotonic() < deadline, f"still {response.status}"
        time.sleep(0.05)


def test_a_killed_replica_s_runs_are_taken_over(config_path: Path) -> None:  # noqa: F811
    """`sleep-1500` streams nothing for 1.5 s: killed before, it runs again elsewhere from the start.
    `slow-stream` streams at once: killed after, it fails (nothing charged). The survivor starts after the
    kill, so the doomed replica is the one that claimed both."""
    with _replica(config_path) as (proc, url):
        admin = Admin(url, MASTER)
        key = str(admin.create_key(scopes=["chat"], credits_micros=10**7)["key"])
        admin.close()
        (doomed,) = _clients([url], key)
        quiet = doomed.responses.create(model="sleep-1500", input="quiet", background=True)
        loud = doomed.responses.create(model="slow-stream", input="loud", background=True)
        _status(doomed, quiet.id, ("in_progress",), 5)
        with doomed.responses.retrieve(loud.id, stream=True) as events:
            for event in events:
                if event.type == "response.output_text.delta":
                    break  # it has streamed output: stored events
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        doomed.close()
    with _replica(config_path) as (_, url):
        (survivor,) = _clients([url], key)
        _taken_over(survivor, quiet.id, loud.id)
        survivor.close()


def _taken_over(survivor: openai.OpenAI, quiet: str, loud: str) -> None:
    done = _status(survivor, quiet, ("completed", "failed"), 20)
    assert done.status == "completed" and done.output_text == "echo: quiet"
    failed = _status(survivor, loud, ("failed",), 20)
    assert failed.error is not None and "not charged" in failed.error.message
    events = list(survivor.responses.retrieve(loud, stream=True))
    assert events[-1].type == "response.failed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
