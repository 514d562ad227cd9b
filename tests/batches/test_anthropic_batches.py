"""Anthropic's Message Batches API through the official `anthropic` SDK, against a gateway on SQLite whose own
worker runs the requests on a validating OpenAI-compatible fake: results as Anthropic messages and errors,
each request charged once, a failed one nothing; create refusals naming `requests[<i>]...`; owners; paging
both ways; cancel; delete; and the renderings of a batch and of each result kind (tables)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from inferplex.batches.service import Batch, Counts, LineResult
from inferplex.canonical import parse
from inferplex.dialects.anthropic.batches import individual_response, line_request, lines_of, message_batch
from inferplex.dialects.anthropic.batches_wire import CreateMessageBatch
from inferplex.errors import InvalidRequest
from tests.accounts.conftest import Admin
from tests.batches.test_openai_batches import CREDITS, batches_config, chat_line, jsonl, wait_for
from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.test_openapi import _fits, _schema

CLAUDE_KEY = "sk-ant-batches-fake"


@pytest.fixture(scope="module")
def claude() -> Iterator[FakeAnthropic]:
    fake = FakeAnthropic(CLAUDE_KEY).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def server(
    fake_openai: FakeOpenAI, claude: FakeAnthropic, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    """The batch test gateway (OpenAI-compatible fake), plus `claude-think` on the Anthropic fake."""
    config = batches_config(fake_openai, tmp_path_factory.mktemp("anthropic-batches"))
    config["providers"].append(
        {"name": "claude", "kind": "anthropic", "base_url": claude.url, "api_key": "env:BATCH_TEST_ANTHROPIC_KEY"}
    )
    config["models"].append(
        {"name": "claude-think", "deployments": [{"provider": "claude", "model": "claude-think-1"}],
         "pricing": {"input": "0", "output": "3"}}
    )  # fmt: skip
    with pytest.MonkeyPatch.context() as env:
        env.setenv("BATCH_TEST_ANTHROPIC_KEY", CLAUDE_KEY)
        with GatewayServer(config) as s:
            yield s


def new_client(server: GatewayServer, admin: Admin) -> tuple[anthropic.Anthropic, str]:
    made = admin.create_key(credits_micros=CREDITS)
    return anthropic.Anthropic(api_key=made["key"], base_url=server.url, max_retries=0, timeout=30), made["account_id"]


def request(custom_id: str, text: str, model: str = "priced", **params: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": text}]
    return {"custom_id": custom_id, "params": {"model": model, "max_tokens": 50, "messages": messages, **params}}


def ended(client: anthropic.Anthropic, batch_id: str) -> Any:
    return wait_for(lambda: (b := client.messages.batches.retrieve(batch_id)).processing_status == "ended" and b)


def test_a_message_batch_runs_to_its_results_each_request_charged_once(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI
) -> None:
    client, account = new_client(server, admin)
    requests = [request(f"q{i}", f"question {i}", system="be brief") for i in range(4)]
    requests.insert(1, request("broken", "fails upstream", model="error-400"))
    made = client.messages.batches.create(requests=requests)  # type: ignore[arg-type]
    assert made.id.startswith("msgbatch_") and made.type == "message_batch"
    assert made.processing_status == "in_progress" and made.results_url is None and made.ended_at is None
    assert made.expires_at > made.created_at
    done = ended(client, made.id)
    assert done.ended_at is not None and done.results_url == f"{server.url}/v1/messages/batches/{made.id}/results"
    counts = done.request_counts
    assert (counts.processing, counts.succeeded, counts.errored, counts.canceled, counts.expired) == (0, 4, 1, 0, 0)
    results = {r.custom_id: r.result for r in client.messages.batches.results(made.id)}
    assert set(results) == {"q0", "q1", "q2", "q3", "broken"}
    for i in range(4):
        result = results[f"q{i}"]
        assert result.type == "succeeded"
        message = result.message
        assert message.type == "message" and message.role == "assistant" and message.model == "priced"
        assert message.content[0].type == "text" and message.content[0].text == f"echo: question {i}"
        assert message.stop_reason == "end_turn" and message.usage.output_tokens > 0
    broken = results["broken"]
    assert broken.type == "errored" and broken.error.error.type == "invalid_request_error"
    # The system prompt went upstream as OpenAI's system message: translated as /v1/messages translates it.
    sent = [
        r.body for r in fake_openai.state.requests if r.body.get("messages", [{}])[-1].get("content") == "question 0"
    ]
    assert sent and sent[-1]["messages"][0] == {"role": "system", "content": "be brief"}
    # Each succeeded request charged once (3 micro-USD per output token for `priced`), the failed one nothing.
    charged = 3 * sum(results[f"q{i}"].message.usage.output_tokens for i in range(4))  # type: ignore[union-attr]
    wait_for(lambda: int(admin.account(account)["balance_micros"]) == CREDITS - charged)


def test_anthropics_own_details_reach_an_anthropic_upstream(
    server: GatewayServer, admin: Admin, claude: FakeAnthropic
) -> None:
    """Thinking, top_k and cache_control go to an Anthropic upstream as `/v1/messages` sends them, and the
    thinking block comes back in the result's message."""
    client, _ = new_client(server, admin)
    content = [{"type": "text", "text": "think about it", "cache_control": {"type": "ephemeral"}}]
    params = {"model": "claude-think", "max_tokens": 2000, "top_k": 7,
              "messages": [{"role": "user", "content": content}],
              "thinking": {"type": "enabled", "budget_tokens": 1024}}  # fmt: skip
    made = client.messages.batches.create(requests=[{"custom_id": "deep", "params": params}])  # type: ignore[list-item,typeddict-item]
    ended(client, made.id)
    (result,) = list(client.messages.batches.results(made.id))
    assert result.result.type == "succeeded", result
    blocks = result.result.message.content
    assert [b.type for b in blocks] == ["thinking", "text"] and blocks[1].text == "echo: think about it"  # type: ignore[union-attr]
    sent = claude.last("/v1/messages").body
    assert sent["top_k"] == 7 and sent["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert sent["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral"}


def test_anthropics_own_details_stay_off_an_openai_compatible_upstream(
    server: GatewayServer, admin: Admin, fake_openai: FakeOpenAI
) -> None:
    """The same details on a line served by an OpenAI-compatible upstream are not sent there (OpenAI refuses
    unknown arguments), as `/v1/messages` leaves them off: the line runs as that route runs it."""
    client, _ = new_client(server, admin)
    content = [{"type": "text", "text": "plain upstream", "cache_control": {"type": "ephemeral"}}]
    params = {"model": "priced", "max_tokens": 50, "top_k": 7, "messages": [{"role": "user", "content": content}]}
    made = client.messages.batches.create(requests=[{"custom_id": "plain", "params": params}])  # type: ignore[list-item,typeddict-item]
    ended(client, made.id)
    (result,) = list(client.messages.batches.results(made.id))
    assert result.result.type == "succeeded", result
    sent = [r.body for r in fake_openai.state.requests if "plain upstream" in str(r.body.get("messages"))]
    assert sent, "the line never reached the upstream"
    assert "top_k" not in sent[-1] and "cache_control" not in str(sent[-1]), sent[-1]


def test_create_refusals_name_the_request_and_field(server: GatewayServer, admin: Admin) -> None:
    client, _ = new_client(server, admin)
    no_max_tokens = {"custom_id": "b", "params": {"model": "priced", "messages": [{"role": "user", "content": "x"}]}}
    cases: list[tuple[list[dict[str, Any]], str]] = [
        ([request("a", "x"), no_max_tokens], "requests[1].params.max_tokens"),
        ([request("a", "x"), request("a", "y")], "requests[1].custom_id"),
        ([request("a b", "x")], "requests[0].custom_id"),
        ([request("a", "x", stream=True)], "requests[0].params.stream"),
        ([request("a", "x", temperature=3)], "requests[0].params.temperature"),
        ([], "requests"),
    ]
    for requests, where in cases:
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.batches.create(requests=requests)  # type: ignore[arg-type]
        body = caught.value.body
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        assert where in body["error"]["message"], (where, body)  # type: ignore[index]
    assert list(client.messages.batches.list()) == []  # nothing was made


def test_batches_are_their_owners_and_page_both_ways(server: GatewayServer, admin: Admin) -> None:
    client, _ = new_client(server, admin)
    other, _ = new_client(server, admin)
    made = [client.messages.batches.create(requests=[request("a", f"n{i}")]).id for i in range(3)]  # type: ignore[list-item]
    newest_first = made[::-1]
    first = client.messages.batches.list(limit=2)
    assert [b.id for b in first.data] == newest_first[:2] and first.has_more
    assert first.first_id == newest_first[0] and first.last_id == newest_first[1]
    assert [b.id for b in client.messages.batches.list(limit=2)] == newest_first  # the SDK follows `after_id`
    assert [b.id for b in client.messages.batches.list(after_id=newest_first[0])] == newest_first[1:]
    assert [b.id for b in client.messages.batches.list(before_id=newest_first[2]).data] == newest_first[:2]
    assert list(other.messages.batches.list()) == []
    for batch_id in made:
        ended(client, batch_id)
    for call in (
        lambda: other.messages.batches.retrieve(made[0]),
        lambda: other.messages.batches.cancel(made[0]),
        lambda: other.messages.batches.delete(made[0]),
        lambda: list(other.messages.batches.results(made[0])),
    ):
        with pytest.raises(anthropic.NotFoundError) as caught:
            call()
        assert caught.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    headers = {"x-api-key": client.api_key}
    r = httpx.get(f"{server.url}/v1/messages/batches", params={"limit": "0"}, headers=headers)
    assert r.status_code == 400 and r.json()["type"] == "error"
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.list(after_id="msgbatch_" + "0" * 32)  # an unknown cursor


def test_cancel_ends_the_batch_with_canceled_results_for_what_never_ran(server: GatewayServer, admin: Admin) -> None:
    client, _ = new_client(server, admin)
    made = client.messages.batches.create(
        requests=[request(f"s{i}", f"slow {i}", model="sleep-200") for i in range(40)]
    )  # type: ignore[misc]
    cancelling = client.messages.batches.cancel(made.id)
    assert cancelling.processing_status in ("canceling", "ended") and cancelling.cancel_initiated_at is not None
    done = ended(client, made.id)
    counts = done.request_counts
    assert counts.canceled > 0 and counts.succeeded + counts.canceled + counts.errored == 40
    results = list(client.messages.batches.results(made.id))
    assert sorted(r.custom_id for r in results) == sorted(f"s{i}" for i in range(40))
    kinds = [r.result.type for r in results]
    assert kinds.count("canceled") == counts.canceled and kinds.count("succeeded") == counts.succeeded


def test_delete_an_ended_batch_but_not_one_in_progress(server: GatewayServer, admin: Admin) -> None:
    client, _ = new_client(server, admin)
    slow = client.messages.batches.create(requests=[request(f"s{i}", "x", model="sleep-200") for i in range(20)])  # type: ignore[misc]
    with pytest.raises(anthropic.BadRequestError):
        client.messages.batches.delete(slow.id)
    r = httpx.get(f"{server.url}/v1/messages/batches/{slow.id}/results", headers={"x-api-key": client.api_key})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"  # not ended yet
    client.messages.batches.cancel(slow.id)
    ended(client, slow.id)
    deleted = client.messages.batches.delete(slow.id)
    assert deleted.id == slow.id and deleted.type == "message_batch_deleted"
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(slow.id)


def test_the_two_apis_do_not_see_each_others_batches(server: GatewayServer, admin: Admin) -> None:
    client, _ = new_client(server, admin)
    key = {"Authorization": f"Bearer {client.api_key}"}
    theirs = client.messages.batches.create(requests=[request("a", "x")])  # type: ignore[list-item]
    assert httpx.get(f"{server.base_url}/batches/{theirs.id}", headers=key).status_code == 404
    file_id = httpx.post(
        f"{server.base_url}/files", headers=key, files={"file": ("a.jsonl", jsonl([chat_line("a", "priced", "x")])),
                                                       "purpose": (None, "batch")},
    ).json()["id"]  # fmt: skip
    create = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    openai_batch = httpx.post(f"{server.base_url}/batches", headers=key, json=create).json()["id"]
    with pytest.raises(anthropic.NotFoundError):
        client.messages.batches.retrieve(openai_batch)
    assert openai_batch not in [b.id for b in client.messages.batches.list()]
    ended(client, theirs.id)


def test_answers_fit_the_openapi_document(server: GatewayServer, admin: Admin) -> None:
    client, _ = new_client(server, admin)
    headers = {"x-api-key": client.api_key}
    url = server.url + "/v1/messages/batches"
    made = httpx.post(url, headers=headers, json={"requests": [request("a", "x")]})
    batch_id = made.json()["id"]
    answers = [
        ("", "post", made),
        ("", "post", httpx.post(url, headers=headers, json={"requests": []})),
        ("", "get", httpx.get(url, headers=headers)),
        ("/{batch_id}", "get", httpx.get(f"{url}/{batch_id}", headers=headers)),
        ("/{batch_id}", "get", httpx.get(f"{url}/msgbatch_nope", headers=headers)),
        ("/{batch_id}/cancel", "post", httpx.post(f"{url}/{batch_id}/cancel", headers=headers)),
    ]
    ended(client, batch_id)
    answers.append(("/{batch_id}", "delete", httpx.delete(f"{url}/{batch_id}", headers=headers)))
    for path, method, answer in answers:
        _fits(_schema("/v1/messages/batches" + path, method, answer.status_code), answer.json())


# ---- renderings, as tables --------------------------------------------------------------------------------------

_BASE = Batch(
    id="msgbatch_x", dialect="anthropic", owner="acct", endpoint="/v1/chat/completions", input_file_id=None,
    completion_window="24h", status="in_progress", counts=Counts(total=5, completed=1, failed=1), created_at=0,
    expires_at=86400,
)  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "status", "results", "ended_at"),
    [
        ({}, "in_progress", False, None),
        ({"status": "validating"}, "in_progress", False, None),
        ({"status": "finalizing"}, "in_progress", False, None),
        ({"status": "cancelling", "cancelling_at": 5}, "canceling", False, None),
        ({"status": "completed", "ended_at": 60}, "ended", True, "1970-01-01T00:01:00Z"),
        ({"status": "cancelled", "ended_at": 60}, "ended", True, "1970-01-01T00:01:00Z"),
        ({"status": "expired", "ended_at": 60}, "ended", True, "1970-01-01T00:01:00Z"),
        ({"status": "failed", "ended_at": 60}, "ended", True, "1970-01-01T00:01:00Z"),
    ],
)
def test_message_batch_table(changes: dict[str, Any], status: str, results: bool, ended_at: str | None) -> None:
    rendered = message_batch(dataclasses.replace(_BASE, **changes), "http://gw:1/")
    assert rendered["processing_status"] == status and rendered["ended_at"] == ended_at
    assert rendered["results_url"] == ("http://gw:1/v1/messages/batches/msgbatch_x/results" if results else None)
    assert rendered["created_at"] == "1970-01-01T00:00:00Z" and rendered["expires_at"] == "1970-01-02T00:00:00Z"
    counts = rendered["request_counts"]
    assert counts == {"processing": 3, "succeeded": 1, "errored": 1, "canceled": 0, "expired": 0}
    assert rendered["cancel_initiated_at"] == ("1970-01-01T00:00:05Z" if "cancelling_at" in changes else None)
    assert anthropic.types.messages.MessageBatch.model_validate(rendered).id == "msgbatch_x"


_COMPLETION = {
    "id": "chatcmpl-1", "object": "chat.completion", "model": "priced", "created": 0,
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}  # fmt: skip


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (LineResult(0, "a", "succeeded", 200, _COMPLETION),
         {"type": "succeeded", "message": {"model": "priced", "content": [{"type": "text", "text": "hi"}],
                                           "stop_reason": "end_turn"}}),
        (LineResult(1, "b", "errored", 400, {"error": {"message": "bad", "type": "invalid_request_error"}}),
         {"type": "errored", "error": {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}}),
        (LineResult(2, "c", "errored", 404, {"error": {"message": "no model"}}),
         {"type": "errored", "error": {"type": "error", "error": {"type": "not_found_error", "message": "no model"}}}),
        (LineResult(3, "d", "errored", 502, {"error": {"message": "upstream"}}),
         {"type": "errored", "error": {"type": "error", "error": {"type": "api_error", "message": "upstream"}}}),
        (LineResult(4, "e", "errored", 529, {"error": {"message": "busy"}}),
         {"type": "errored", "error": {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}}),
        (LineResult(5, "f", "cancelled", 0, None, {"code": "batch_cancelled", "message": "m"}), {"type": "canceled"}),
        (LineResult(6, "g", "expired", 0, None, {"code": "batch_expired", "message": "m"}), {"type": "expired"}),
    ],
)  # fmt: skip
def test_individual_response_table(line: LineResult, expected: dict[str, Any]) -> None:
    rendered = individual_response(line)
    assert rendered["custom_id"] == line.custom_id
    result: dict[str, Any] = dict(rendered["result"])
    if "message" in expected:
        result["message"] = {k: result["message"][k] for k in expected["message"]}
    assert result == expected
    parsed = anthropic.types.messages.MessageBatchIndividualResponse.model_validate(rendered)
    assert parsed.result.type == expected["type"]


def test_lines_are_translated_as_messages_translates_them() -> None:
    body = CreateMessageBatch.model_validate(
        {"requests": [request("a", "hi", system="sys", top_k=5, stop_sequences=["END"])]}
    )
    (line,) = lines_of(body, ["beta-1"])
    assert line.custom_id == "a"
    assert line.body["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    assert line.body["model"] == "priced" and line.body["stop"] == ["END"] and line.body["top_k"] == 5
    assert line.body["anthropic_extra"]["betas"] == ["beta-1"]
    with pytest.raises(InvalidRequest) as caught:  # the create body's own validation, as the route parses it
        parse(CreateMessageBatch, {"requests": [request("a", "x", max_tokens=0)]})
    assert caught.value.param == "requests[0].params.max_tokens"


def test_line_request_keeps_anthropics_details_on_the_body_and_off_the_wire() -> None:
    content = [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]
    params = request("a", "", top_k=5, thinking={"type": "enabled", "budget_tokens": 1024})["params"]
    params["messages"] = [{"role": "user", "content": content}]
    (line,) = lines_of(parse(CreateMessageBatch, {"requests": [{"custom_id": "a", "params": params}]}), ["b-1"])
    run = line_request(line.body)
    extras = run.body.model_extra or {}
    assert extras["top_k"] == 5 and extras["thinking"]["budget_tokens"] == 1024 and extras["anthropic_extra"]
    wire = run.wire()  # what an OpenAI-compatible upstream is sent, as from /v1/messages
    assert not {"top_k", "thinking", "anthropic_extra"} & wire.keys()
    assert wire["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
