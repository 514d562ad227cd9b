"""`/v1/responses` through a real gateway with the official `openai` SDK, on a provider that speaks Responses
(`options.responses_api: true`, the fake OpenAI's `/v1/responses`): the request reaches the upstream as
written (hosted tools too, which the translated road refuses), the answer and the events come back as the
upstream sent them, stored under the gateway's id before the caller has them, a `previous_response_id`
chain (also one begun on the translated road) sends the whole history, and the cost is the ledger's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.accounts.conftest import Admin, billing_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.responses_api.conftest import stored
from tests.responses_api.schema import check_response


@pytest.fixture(scope="module")
def server(fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    tmp = tmp_path_factory.mktemp("native-http")
    config = billing_config(fake_openai, tmp, responses={"tick_s": 0.2, "follow_poll_s": 0.02})
    native = {**config["providers"][0], "name": "native", "options": {"responses_api": True}}
    config["providers"].append(native)
    priced = {"input": "0", "output": "3"}
    for name, upstream in (
        ("native-echo", "gpt-x"),
        ("native-search", "search-x"),
        ("native-broken", "error-500"),
        ("native-cut", "die-midstream"),
    ):
        deployments = [{"provider": "native", "model": upstream}]
        config["models"].append(
            {"name": name, "deployments": deployments, "max_output": 100, "pricing": priced, "routing": {"retries": 0}}
        )
    with GatewayServer(config) as gw:
        yield gw


def _upstream(fake: FakeOpenAI) -> dict[str, Any]:
    return fake.state.last("/responses").body


def test_hosted_tools_go_upstream_and_the_answer_comes_back_as_it_was(
    client: openai.OpenAI, fake_openai: FakeOpenAI, server: GatewayServer
) -> None:
    response = client.responses.create(model="native-search", input="news today", tools=[{"type": "web_search"}])
    assert [i.type for i in response.output] == ["web_search_call", "message"]
    assert response.output_text == "echo: news today" and response.model == "native-search"
    check_response(response.model_dump(mode="json", exclude_unset=True))
    sent = _upstream(fake_openai)
    assert sent["model"] == "search-x" and sent["store"] is False and sent["tools"] == [{"type": "web_search"}]
    row = stored(server, response.id)
    assert row is not None and row.response["id"] == response.id
    assert client.responses.retrieve(response.id).output_text == "echo: news today"


def test_a_chain_sends_the_history_upstream(client: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    first = client.responses.create(model="echo-model", input="my name is Ada")  # the translated road
    second = client.responses.create(model="native-echo", input="and yours?", previous_response_id=first.id)
    third = client.responses.create(model="native-echo", input="bye", previous_response_id=second.id)
    assert third.previous_response_id == second.id and third.output_text == "echo: bye"
    sent = _upstream(fake_openai)
    assert "previous_response_id" not in sent
    said = [
        (i.get("role"), i["content"] if isinstance(i["content"], str) else i["content"][0]["text"])
        for i in sent["input"]
    ]
    assert said == [
        ("user", "my name is Ada"),
        ("assistant", "echo: my name is Ada"),
        ("user", "and yours?"),
        ("assistant", "echo: and yours?"),
        ("user", "bye"),
    ]


def test_a_stream_is_relayed_and_stored_before_it_completes(
    client: openai.OpenAI, server: GatewayServer, fake_openai: FakeOpenAI
) -> None:
    kinds: list[str] = []
    with client.responses.stream(model="native-echo", input="stream me please") as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.completed":
                row = stored(server, event.response.id)  # already there when the event arrives
                assert row is not None and row.status == "completed"
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert kinds.count("response.output_text.delta") == 4
    assert final.output_text == "echo: stream me please" and final.id.startswith("resp_")
    assert _upstream(fake_openai)["stream"] is True


def test_the_cost_is_the_ledgers(client: openai.OpenAI, server: GatewayServer, account: tuple[str, str]) -> None:
    admin = Admin(server.url, server.master_key)
    before = admin.account(account[1])["balance_micros"]
    raw = client.responses.with_raw_response.create(model="native-echo", input="a b c d")
    response = raw.parse()
    assert response.usage is not None
    cost = int(raw.headers["x-inferplex-cost-micros"])
    assert cost == 3 * response.usage.output_tokens  # 0 per input token, 3 micro-USD per output token
    row = stored(server, response.id)
    assert row is not None and row.cost_micros == cost
    deadline = time.monotonic() + 5
    while admin.account(account[1])["balance_micros"] != before - cost:
        assert time.monotonic() < deadline, "the ledger did not settle the response's cost"
        time.sleep(0.05)
    with pytest.raises(openai.APIStatusError) as caught:
        client.responses.create(model="native-broken", input="hi")
    assert caught.value.status_code == 502 and "fake upstream failure 500" in caught.value.message
    time.sleep(0.2)
    assert admin.account(account[1])["balance_micros"] == before - cost  # a failed call is charged nothing
    admin.close()


def test_a_stream_cut_mid_way_ends_failed_stored_and_charged_for_what_came(
    client: openai.OpenAI, server: GatewayServer
) -> None:
    events = list(client.responses.create(model="native-cut", input="one two three", stream=True))
    assert events[-1].type == "response.failed" and events[-2].type == "response.output_text.delta"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    failed: Any = events[-1]
    assert failed.response.error is not None and "charged" in failed.response.error.message.lower()
    row = stored(server, failed.response.id)
    assert row is not None and row.status == "failed" and row.history is None
    assert row.cost_micros is not None and row.cost_micros > 0  # the text delivered before the cut


def test_a_background_response_runs_natively(client: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    queued = client.responses.create(
        model="native-search", input="later", background=True, tools=[{"type": "web_search"}]
    )
    assert queued.status in ("queued", "in_progress") and queued.background is True
    deadline = time.monotonic() + 20
    while (done := client.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, f"still {done.status}"
        time.sleep(0.05)
    assert done.status == "completed" and done.output_text == "echo: later" and done.background is True
    sent = _upstream(fake_openai)
    assert "background" not in sent and sent["store"] is False and sent["stream"] is True
    events = list(client.responses.retrieve(queued.id, stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.id == queued.id
    assert "response.web_search_call.completed" in [e.type for e in events]
