"""Draining one `inferplex serve --workers 1` process on SIGTERM (what each replica of a fleet runs)."""

from __future__ import annotations

import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.serving.conftest import config
from tests.serving.upstream import PacedUpstream


def _stream(served: Any, model: str, started: threading.Event, out: dict[str, Any]) -> None:
    try:
        stream = served.client().chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        out["text"] = ""
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                out["text"] += chunk.choices[0].delta.content
                started.set()
            if chunk.usage is not None:
                out["usage"] = chunk.usage.completion_tokens
    except Exception as exc:  # the test asserts on what was received
        out["error"] = exc
    finally:
        started.set()


def test_sigterm_drains_a_stream_turns_not_ready_at_once_and_exits_0(
    serve: Any, upstream: PacedUpstream, tmp_path: Path
) -> None:
    served = serve(config(upstream, tmp_path, ("ok", "paced-30"), drain_delay_s=1.0, drain_s=10))
    ready = httpx.get(served.url + "/health/ready")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    started, out = threading.Event(), {}
    reader = threading.Thread(target=_stream, args=(served, "paced-30", started, out))
    reader.start()
    assert started.wait(10)
    served.signal(signal.SIGTERM)
    signalled = time.monotonic()
    # Not ready at once; alive all along; still accepting (and answering) during the drain delay.
    not_ready = httpx.get(served.url + "/health/ready")
    assert not_ready.status_code == 503 and not_ready.json()["error"]["code"] == "draining"
    alive = httpx.get(served.url + "/health")
    assert alive.status_code == 200
    assert alive.headers["connection"] == "close"  # keep-alive clients are moved off before the listener closes
    answer = served.client().chat.completions.create(model="ok", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "ok"
    # After the delay, new connections are refused while the stream goes on.
    time.sleep(max(0.0, signalled + 1.3 - time.monotonic()))
    assert served.proc.poll() is None and reader.is_alive()
    with pytest.raises(httpx.ConnectError):
        httpx.get(served.url + "/health", timeout=2)
    reader.join(15)
    assert "error" not in out, out.get("error")
    assert out["text"] == "".join(f"tick {i} " for i in range(30))  # the whole stream, nothing cut
    assert out["usage"] == 30
    assert served.proc.wait(10) == 0
    assert time.monotonic() - signalled < 10  # within the grace (the stream needed ~3 s of it)


def test_a_stream_longer_than_the_grace_is_cut_cleanly_and_the_process_exits_0(
    serve: Any, upstream: PacedUpstream, tmp_path: Path
) -> None:
    served = serve(config(upstream, tmp_path, ("ok", "paced-300"), drain_s=1))
    left_before = upstream.counts.left
    started, out = threading.Event(), {}
    reader = threading.Thread(target=_stream, args=(served, "paced-300", started, out))
    reader.start()
    assert started.wait(10)
    served.signal(signal.SIGTERM)
    signalled = time.monotonic()
    assert served.proc.wait(15) == 0
    reader.join(10)
    assert time.monotonic() - signalled < 8  # the 1 s grace, then the cut stream's settling
    # The caller saw the connection close mid-stream, after what had been sent (no end of stream, no usage).
    assert isinstance(out.get("error"), openai.APIConnectionError) and "usage" not in out
    whole = "".join(f"tick {i} " for i in range(300))
    assert out["text"].startswith("tick 0 tick 1 ") and len(out["text"]) < len(whole)
    # The gateway left the upstream as a caller who hangs up does: the upstream request was cancelled.
    deadline = time.monotonic() + 5
    while upstream.counts.left == left_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert upstream.counts.left > left_before
    log = served.log()
    assert "cutting 1 connection" in log and "drained" in log
    # Settled as for a caller who left: its usage row written before the exit, tokens counted up to the cut.
    with sqlite3.connect(tmp_path / "inferplex.db") as db:
        rows = db.execute("SELECT completion_tokens, estimated FROM usage WHERE model = 'paced-300'").fetchall()
    assert len(rows) == 1 and rows[0][0] > 0 and rows[0][1] == 1


def test_sighup_does_not_stop_a_single_process(serve: Any, upstream: PacedUpstream, tmp_path: Path) -> None:
    served = serve(config(upstream, tmp_path))
    served.signal(signal.SIGHUP)
    served.wait_log("SIGHUP ignored")
    assert served.client().chat.completions.create(model="ok", messages=[{"role": "user", "content": "hi"}])
    assert served.proc.poll() is None
