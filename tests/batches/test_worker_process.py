"""`inferplex worker`: a gateway that serves HTTP but runs no batch worker (`batches.worker: false`), and a
worker process beside it with no HTTP server, sharing the database and the media directory: the batch created
through the gateway is run by the worker, and SIGTERM stops the worker cleanly."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai
import yaml
from openai.types import Batch

from tests.accounts.conftest import Admin
from tests.batches.test_crash import start, wait_for
from tests.batches.worker_harness import MASTER, batch_config, chat_line
from tests.conftest import UPSTREAM_KEY
from tests.fakes.openai_upstream import FakeOpenAI


def test_a_worker_process_runs_the_batches_a_gateway_without_one_accepts(
    fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    config = batch_config(fake_openai, tmp_path, worker=False)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    gateway, url = start(path)
    env = {**os.environ, "FAKE_UPSTREAM_KEY": UPSTREAM_KEY, "BATCHES_TEST_MASTER": MASTER}
    worker: subprocess.Popen[bytes] | None = None
    try:
        admin = Admin(url, MASTER)
        key = admin.create_key(credits_micros=10_000_000)["key"]
        admin.close()
        client = openai.OpenAI(api_key=key, base_url=url + "/v1", max_retries=0, timeout=30)
        data = "".join(json.dumps(chat_line(f"l{i}")) + "\n" for i in range(10)).encode()
        file = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
        batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
        time.sleep(0.5)
        assert client.batches.retrieve(batch.id).status == "in_progress"  # nobody runs it yet
        with open(tmp_path / "worker.log", "wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "inferplex", "worker", "--config", str(path)],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

        def completed() -> Batch | None:
            found = client.batches.retrieve(batch.id)
            return found if found.status == "completed" else None

        done = wait_for(completed, 30, 0.05)
        assert done.request_counts is not None and done.request_counts.completed == 10
        assert done.output_file_id is not None
        output = client.files.content(done.output_file_id).content.splitlines()
        assert sorted(json.loads(x)["custom_id"] for x in output) == sorted(f"l{i}" for i in range(10))
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(15) == 0, (tmp_path / "worker.log").read_text()
        assert "worker running batches" in (tmp_path / "worker.log").read_text()
    finally:
        if worker is not None and worker.poll() is None:
            worker.kill()
        gateway.terminate()
        gateway.wait(15)
