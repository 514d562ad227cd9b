"""OpenAI's Batch API through the official `openai` SDK, against a gateway on SQLite whose own worker runs the
lines (quickly: `batches.tick_s` is short) on a validating fake upstream: chat, embeddings and responses batches to
their output and error files, a failing line charged nothing, an input file that does not hold, refusals
in OpenAI's shape, owners, paging, cancel; and the `batch` object rendered as OpenAI's (a table)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from inferplex.batches.service import Batch, Counts
from inferplex.dialects.openai_batches import batch_object
from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.test_openapi import _fits, _schema

CREDITS = 10_000_000


def batches_config(fake: FakeOpenAI, tmp: Any, **batches: Any) -> dict[str, Any]:
    """The billing test config (`priced`: 3 micro-USD per output token; `sleep-<ms>` models), a worker that
    looks for lines every 50 ms, and the media store for the files."""
    config = billing_config(fake, tmp)
    config["models"] += [
        {"name": "sleep-200", "deployments": [{"provider": "fake", "model": "sleep-200"}], "pricing": {"free": True}}
    ]
    config["batches"] = {"tick_s": 0.05, "concurrency": 4, **batches}
    return config


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    with GatewayServer(batches_config(fake_openai, tmp_path_factory.mktemp("openai-batches"))) as s:
        yield s


def new_client(server: GatewayServer, admin: Admin) -> tuple[openai.OpenAI, str]:
    """A client with a key and an account of its own: (client, account id)."""
    made = admin.create_key(credits_micros=CREDITS)
    client = openai.OpenAI(api_key=made["key"], base_url=server.base_url, max_retries=0, timeout=30)
    return client, made["account_id"]


def wait_for(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)
    return found


def ended(client: openai.OpenAI, batch_id: str) -> Any:
    return wait_for(lambda: (b := client.batches.retrieve(batch_id)).status in ENDED and b)


ENDED = ("completed", "failed", "expired", "cancelled")


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def chat_line(custom_id: str, model: str, text: str, url: str = "/v1/chat/completions") -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": text}]}
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def upload(client: openai.OpenAI, lines: list[dict[str, Any]]) -> str:
    return client.files.create(file=("input.jsonl", jsonl(lines)), purpose="batch").id


def read_lines(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).content.splitlines()]


def balance(admin: Admin, account: str) -> int:
    return int(admin.account(account)["balance_micros"])


def test_a_chat_batch_runs_to_its_output_and_error_files_each_line_charged_once(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI
) -> None:
    client, account = new_client(server, admin)
    lines = [chat_line(f"ok-{i}", "priced", f"hello number {i}") for i in range(5)]
    lines.insert(2, chat_line("refused", "error-400", "this one fails upstream"))
    made = client.batches.create(
        input_file_id=upload(client, lines),
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"job": "nightly"},
    )
    assert made.id.startswith("batch_") and made.object == "batch" and made.endpoint == "/v1/chat/completions"
    assert made.status in ("validating", "in_progress", "finalizing", "completed")
    assert made.metadata == {"job": "nightly"} and made.completion_window == "24h"
    assert made.request_counts is not None and made.request_counts.total == 6
    done = ended(client, made.id)
    assert done.status == "completed" and done.completed_at is not None and done.in_progress_at is not None
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (6, 5, 1)
    output, errors = read_lines(client, done.output_file_id), read_lines(client, done.error_file_id)
    assert sorted(o["custom_id"] for o in output) == [f"ok-{i}" for i in range(5)]
    assert [e["custom_id"] for e in errors] == ["refused"]
    for line in output:
        assert line["id"].startswith("batch_req_") and line["error"] is None
        response = line["response"]
        assert response["status_code"] == 200 and response["request_id"]
        body = response["body"]
        assert body["object"] == "chat.completion" and body["model"] == "priced"
        number = line["custom_id"].removeprefix("ok-")
        assert body["choices"][0]["message"]["content"] == f"echo: hello number {number}"
    failed = errors[0]["response"]
    assert failed["status_code"] == 400 and failed["body"]["error"]["message"]
    # Each successful line was charged what its answer says it cost, once; the failed one nothing.
    costs = [line["response"]["body"]["cost"]["micros"] for line in output]
    assert all(cost > 0 for cost in costs)
    wait_for(lambda: balance(admin, account) == CREDITS - sum(costs))
    files = {f.id: f for f in client.files.list(purpose="batch_output")}
    assert {done.output_file_id, done.error_file_id} <= files.keys()


def test_an_embeddings_batch(server: GatewayServer, admin: Admin) -> None:
    client, _ = new_client(server, admin)
    lines = [
        {"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings", "body": {"model": "embed-model", "input": t}}
        for i, t in enumerate(["one", "two", "three"])
    ]
    made = client.batches.create(
        input_file_id=upload(client, lines), endpoint="/v1/embeddings", completion_window="24h"
    )
    done = ended(client, made.id)
    assert done.status == "completed" and done.error_file_id is None
    output = read_lines(client, done.output_file_id)
    assert sorted(o["custom_id"] for o in output) == ["e0", "e1", "e2"]
    assert all(o["response"]["body"]["object"] == "list" for o in output)


def test_a_responses_batch_stores_each_response_for_its_owner(server: GatewayServer, admin: Admin) -> None:
    client, _ = new_client(server, admin)
    other, _ = new_client(server, admin)
    lines = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/responses",
            "body": {"model": "priced", "input": f"hi {i}"},
        }
        for i in range(2)
    ]
    made = client.batches.create(input_file_id=upload(client, lines), endpoint="/v1/responses", completion_window="24h")
    done = ended(client, made.id)
    assert done.status == "completed" and done.error_file_id is None
    output = {o["custom_id"]: o["response"]["body"] for o in read_lines(client, done.output_file_id)}
    for i in range(2):
        body = output[f"r{i}"]
        assert body["object"] == "response" and body["status"] == "completed"
        assert body["output"][0]["content"][0]["text"] == f"echo: hi {i}"
        assert client.responses.retrieve(body["id"]).output_text == f"echo: hi {i}"  # stored, as its route stores
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve(body["id"])


def test_an_input_file_whose_lines_do_not_hold_fails_the_batch_with_its_errors(
    server: GatewayServer, admin: Admin
) -> None:
    client, _ = new_client(server, admin)
    good = chat_line("a", "priced", "hi")
    data = jsonl([good, chat_line("a", "priced", "again"), chat_line("b", "priced", "hi", url="/v1/embeddings")])
    data += b"not json\n"
    file_id = client.files.create(file=("bad.jsonl", data), purpose="batch").id
    made = client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
    assert made.status == "failed" and made.failed_at is not None and made.errors is not None
    assert made.errors.data and all(e.line is not None and e.message for e in made.errors.data)
    assert {e.line for e in made.errors.data} >= {2}  # the repeated custom_id, counted from 1
    assert made.output_file_id is None and made.error_file_id is None


def test_create_refusals_are_openai_errors_naming_the_field(server: GatewayServer, admin: Admin) -> None:
    client, _ = new_client(server, admin)
    other, _ = new_client(server, admin)
    file_id = upload(client, [chat_line("a", "priced", "hi")])
    cases: list[tuple[dict[str, Any], type[openai.APIStatusError], str]] = [
        ({"endpoint": "/v1/completions"}, openai.BadRequestError, "endpoint"),
        ({"endpoint": "/v1/moderations"}, openai.BadRequestError, "endpoint"),
        ({"endpoint": "/v1/nope"}, openai.BadRequestError, "endpoint"),
        ({"completion_window": "1h"}, openai.BadRequestError, "completion_window"),
        ({"input_file_id": "file-" + "0" * 24}, openai.NotFoundError, "input_file_id"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, openai.BadRequestError, "metadata"),
    ]
    for change, error, param in cases:
        args = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h", **change}
        with pytest.raises(error) as caught:
            client.batches.create(**args)
        assert caught.value.body["param"] == param, (change, caught.value.body)  # type: ignore[index]
    with pytest.raises(openai.NotFoundError):  # another owner's input file
        other.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h")
    notes = client.files.create(file=("notes.jsonl", jsonl([chat_line("a", "priced", "hi")])), purpose="user_data")
    with pytest.raises(openai.BadRequestError) as caught:
        client.batches.create(input_file_id=notes.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert caught.value.body["code"] == "invalid_file_purpose"  # type: ignore[index]


def test_batches_are_their_owners_and_listed_newest_first(server: GatewayServer, admin: Admin) -> None:
    client, _ = new_client(server, admin)
    other, _ = new_client(server, admin)
    file_id = upload(client, [chat_line("a", "priced", "hi")])
    made = [
        client.batches.create(input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h").id
        for _ in range(3)
    ]
    first = client.batches.list(limit=2)
    assert [b.id for b in first.data] == made[::-1][:2] and first.has_more
    assert [b.id for b in client.batches.list(limit=2)] == made[::-1]  # the SDK follows `after`
    assert list(other.batches.list()) == []
    for call in (lambda: other.batches.retrieve(made[0]), lambda: other.batches.cancel(made[0])):
        with pytest.raises(openai.NotFoundError):
            call()
    with pytest.raises(openai.NotFoundError):
        client.batches.retrieve("batch_" + "0" * 32)
    r = httpx.get(
        f"{server.base_url}/batches", params={"limit": "0"}, headers={"Authorization": f"Bearer {client.api_key}"}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "limit"
    for batch_id in made:
        ended(client, batch_id)


def test_cancel_stops_a_batch_and_leaves_files_for_what_finished(server: GatewayServer, admin: Admin) -> None:
    client, _ = new_client(server, admin)
    lines = [chat_line(f"slow-{i}", "sleep-200", f"line {i}") for i in range(40)]
    made = client.batches.create(
        input_file_id=upload(client, lines), endpoint="/v1/chat/completions", completion_window="24h"
    )
    cancelling = client.batches.cancel(made.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at is not None
    done = ended(client, made.id)
    assert done.status == "cancelled" and done.cancelled_at is not None
    counts = done.request_counts
    assert counts is not None and counts.total == 40 and counts.completed < 40
    assert counts.completed + counts.failed == 40
    output, errors = read_lines(client, done.output_file_id), read_lines(client, done.error_file_id)
    assert len(output) == counts.completed and len(errors) == counts.failed
    assert sorted(line["custom_id"] for line in output + errors) == sorted(line["custom_id"] for line in lines)
    assert client.batches.cancel(made.id).status == "cancelled"  # an ended batch is answered as it is


def test_answers_fit_the_openapi_document(server: GatewayServer, admin: Admin) -> None:
    client, _ = new_client(server, admin)
    headers = {"Authorization": f"Bearer {client.api_key}"}
    url = server.base_url + "/batches"
    create = {"input_file_id": upload(client, [chat_line("a", "priced", "hi")]), "endpoint": "/v1/chat/completions",
              "completion_window": "24h"}  # fmt: skip
    made = httpx.post(url, headers=headers, json=create)
    batch_id = made.json()["id"]
    answers = [
        ("/v1/batches", "post", made),
        ("/v1/batches", "post", httpx.post(url, headers=headers, json={**create, "endpoint": "/v1/completions"})),
        ("/v1/batches", "get", httpx.get(url, headers=headers)),
        ("/v1/batches/{batch_id}", "get", httpx.get(f"{url}/{batch_id}", headers=headers)),
        ("/v1/batches/{batch_id}", "get", httpx.get(f"{url}/batch_nope", headers=headers)),
        ("/v1/batches/{batch_id}/cancel", "post", httpx.post(f"{url}/{batch_id}/cancel", headers=headers)),
    ]
    for path, method, answer in answers:
        _fits(_schema(path, method, answer.status_code), answer.json())
    ended(client, batch_id)


# ---- the `batch` object, as a table ---------------------------------------------------------------------------

_BASE = Batch(
    id="batch_x", dialect="openai", owner="acct", endpoint="/v1/chat/completions", input_file_id="file-in",
    completion_window="24h", status="in_progress", counts=Counts(total=4, completed=1, failed=1), created_at=100,
    expires_at=86500, in_progress_at=100,
)  # fmt: skip


def _b(**changes: Any) -> Batch:
    return dataclasses.replace(_BASE, **changes)


_FAILED = [{"code": "duplicate_custom_id", "message": "m", "line": 2}]


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        (_BASE, {"status": "in_progress", "request_counts": {"total": 4, "completed": 1, "failed": 1},
                 "errors": None, "output_file_id": None, "in_progress_at": 100, "completed_at": None}),
        # lines cancelled or expired before they ran are in the error file: OpenAI counts them as failed
        (_b(status="cancelled", counts=Counts(total=4, completed=1, failed=1, cancelled=2), cancelled_at=200),
         {"status": "cancelled", "request_counts": {"total": 4, "completed": 1, "failed": 3}, "cancelled_at": 200}),
        (_b(status="failed", counts=Counts(), failed_at=100, errors=_FAILED),
         {"errors": {"object": "list", "data": [{**_FAILED[0], "param": None}]},
          "request_counts": {"total": 0, "completed": 0, "failed": 0}}),
        (_b(status="completed", output_file_id="file-out", completed_at=300, metadata={"k": "v"}),
         {"output_file_id": "file-out", "error_file_id": None, "completed_at": 300, "metadata": {"k": "v"}}),
    ],
)  # fmt: skip
def test_batch_object_table(batch: Batch, expected: dict[str, Any]) -> None:
    rendered = batch_object(batch)
    assert rendered["object"] == "batch" and rendered["id"] == "batch_x" and rendered["input_file_id"] == "file-in"
    assert {k: rendered[k] for k in expected} == expected  # type: ignore[literal-required]
    assert openai.types.Batch.model_validate(rendered).id == "batch_x"
