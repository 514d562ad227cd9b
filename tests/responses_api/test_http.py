"""`/v1/responses` through a real gateway with the official `openai` SDK, on SQLite and on PostgreSQL: buffered,
streamed, `previous_response_id` chains, the stored responses' routes, `store: false`, background responses
(polled, streamed from a sequence number, cancelled), errors in OpenAI's shape, and the cost a stored response
records against the account's ledger."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.accounts.conftest import Admin, billing_config, pg_url  # noqa: F401
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.responses_api.conftest import stored


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    tmp = tmp_path_factory.mktemp("responses")
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    config = billing_config(fake_openai, tmp, url, responses={"tick_s": 0.2, "follow_poll_s": 0.02})
    config["models"].append(
        {
            "name": "slow-priced",
            "deployments": [{"provider": "fake", "model": "slow-stream"}],
            "max_output": 1000,
            "pricing": {"input": "0", "output": "4"},
        }
    )
    with GatewayServer(config) as gw:
        yield gw


def test_buffered_then_retrieve_input_items_delete(client: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    response = client.responses.create(model="echo-model", input="hello there", instructions="Be brief.")
    assert response.status == "completed" and response.output_text == "echo: hello there"
    assert response.id.startswith("resp_") and response.usage is not None and response.usage.output_tokens == 3
    sent = fake_openai.state.last().body
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    again = client.responses.retrieve(response.id)
    assert again.model_dump() == response.model_dump()
    items: Any = client.responses.input_items.list(response.id)
    assert [i.type for i in items.data] == ["message"] and items.data[0].content[0].text == "hello there"
    assert items.first_id == items.data[0].id and items.has_more is False
    client.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)


def test_input_items_pages(client: openai.OpenAI) -> None:
    texts = [f"part {i}" for i in range(5)]
    items = [{"role": "user", "content": t} for t in texts]
    response = client.responses.create(model="echo-model", input=items)  # type: ignore[arg-type]
    first: Any = client.responses.input_items.list(response.id, limit=2, order="asc")
    assert [i.content[0].text for i in first.data] == texts[:2] and first.has_more
    rest: Any = client.responses.input_items.list(response.id, limit=10, order="asc", after=first.last_id)
    assert [i.content[0].text for i in rest.data] == texts[2:] and not rest.has_more
    newest: Any = client.responses.input_items.list(response.id, limit=1)
    assert newest.data[0].content[0].text == texts[-1]


def test_previous_response_id_chain_sends_the_whole_history(client: openai.OpenAI, fake_openai: FakeOpenAI) -> None:
    first = client.responses.create(model="echo-model", input="one")
    second = client.responses.create(model="echo-model", input="two", previous_response_id=first.id)
    third = client.responses.create(model="echo-model", input="three", previous_response_id=second.id)
    assert third.previous_response_id == second.id and third.output_text == "echo: three"
    sent = fake_openai.state.last().body["messages"]
    assert [(m["role"], m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]) for m in sent] == [
        ("user", "one"),
        ("assistant", "echo: one"),
        ("user", "two"),
        ("assistant", "echo: two"),
        ("user", "three"),
    ]


def test_stream_is_stored_before_completed(client: openai.OpenAI, server: GatewayServer) -> None:
    with client.responses.stream(model="echo-model", input="stream me please") as stream:
        kinds = []
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.completed":
                row = stored(server, event.response.id)  # already there when the event arrives
                assert row is not None and row.status == "completed"
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert final.output_text == "echo: stream me please"
    assert client.responses.retrieve(final.id).output_text == final.output_text
    follow = client.responses.create(model="echo-model", input="next", previous_response_id=final.id, stream=True)
    texts = [e.delta for e in follow if e.type == "response.output_text.delta"]
    assert "".join(texts) == "echo: next"


def test_store_false_keeps_nothing(client: openai.OpenAI, server: GatewayServer) -> None:
    response: Any = client.responses.create(model="echo-model", input="forget me", store=False)
    assert response.store is False and stored(server, response.id) is None
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError) as caught:
        client.responses.create(model="echo-model", input="x", previous_response_id=response.id)
    assert caught.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_errors_in_openai_shape(client: openai.OpenAI, server: GatewayServer) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="echo-model", input="x", tools=[{"type": "web_search"}])
    assert bad.value.body["param"] == "tools[0].type"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="echo-model", input=[])
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_" + "0" * 48)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("not-an-id")
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="x")
    raw = httpx.post(
        server.base_url + "/responses", json={"input": "x"}, headers={"Authorization": f"Bearer {client.api_key}"}
    )
    assert raw.status_code == 400 and raw.json()["error"]["param"] == "model"


@pytest.mark.parametrize("mode", [{}, {"stream": True}, {"background": True}])
def test_a_conversation_is_refused_on_every_road(
    client: openai.OpenAI, fake_openai: FakeOpenAI, mode: dict[str, bool]
) -> None:
    """`conversation` is not served: a 400 naming it, buffered, streamed or in the background, before any
    upstream call or stored row."""
    before = len(fake_openai.state.requests)
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="echo-model", input="x", conversation="conv_1", **mode)  # type: ignore[call-overload]
    assert bad.value.body["param"] == "conversation"  # type: ignore[index]
    assert len(fake_openai.state.requests) == before


def test_another_accounts_response_is_a_404(client: openai.OpenAI, server: GatewayServer) -> None:
    mine = client.responses.create(model="echo-model", input="mine")
    admin = Admin(server.url, server.master_key)
    other_key = admin.create_key(scopes=["chat"], credits_micros=10**6)["key"]
    admin.close()
    with openai.OpenAI(base_url=server.base_url, api_key=other_key, max_retries=0) as other:
        for call in (
            lambda: other.responses.retrieve(mine.id),
            lambda: other.responses.delete(mine.id),
            lambda: other.responses.input_items.list(mine.id),
            lambda: other.responses.create(model="echo-model", input="x", previous_response_id=mine.id),
        ):
            with pytest.raises(openai.NotFoundError):
                call()
    assert client.responses.retrieve(mine.id).id == mine.id


def test_cost_recorded_equals_the_ledger(
    client: openai.OpenAI, server: GatewayServer, account: tuple[str, str]
) -> None:
    admin = Admin(server.url, server.master_key)
    before = admin.account(account[1])["balance_micros"]
    raw = client.responses.with_raw_response.create(model="priced", input="a b c d")
    response = raw.parse()
    cost = int(raw.headers["x-inferplex-cost-micros"])
    assert cost == 3 * 5  # `priced`: 3 micro-USD per output token; "echo: a b c d" is 5 words
    row = stored(server, response.id)
    assert row is not None and row.cost_micros == cost
    deadline = time.monotonic() + 5
    while admin.account(account[1])["balance_micros"] != before - cost:
        assert time.monotonic() < deadline, "the ledger did not settle the response's cost"
        time.sleep(0.05)
    admin.close()


def test_input_tokens(client: openai.OpenAI) -> None:
    counted = client.responses.input_tokens.count(model="echo-model", input="a" * 400, instructions="b" * 40)
    assert counted.object == "response.input_tokens" and 100 <= counted.input_tokens <= 130


def _wait(client: openai.OpenAI, response_id: str, statuses: tuple[str, ...]) -> Any:
    deadline = time.monotonic() + 20
    while True:
        response = client.responses.retrieve(response_id)
        if response.status in statuses:
            return response
        assert time.monotonic() < deadline, f"still {response.status}"
        time.sleep(0.05)


def test_background_polled_then_streamed_from_a_sequence_number(client: openai.OpenAI) -> None:
    queued = client.responses.create(model="echo-model", input="in the background", background=True)
    assert queued.status in ("queued", "in_progress") and queued.background is True
    done = _wait(client, queued.id, ("completed",))
    assert done.output_text == "echo: in the background"
    events = list(client.responses.retrieve(queued.id, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    later = list(client.responses.retrieve(queued.id, stream=True, starting_after=3))
    assert [e.sequence_number for e in later] == list(range(4, len(events)))
    follow = client.responses.create(model="echo-model", input="after", previous_response_id=queued.id)
    assert follow.output_text == "echo: after"


def test_background_stream_at_create(client: openai.OpenAI) -> None:
    stream = client.responses.create(model="echo-model", input="live", background=True, stream=True)
    events = list(stream)
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "echo: live"


def test_cancel_background_charges_what_was_produced(
    client: openai.OpenAI, server: GatewayServer, account: tuple[str, str]
) -> None:
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(client.responses.create(model="echo-model", input="x").id)
    queued = client.responses.create(model="slow-priced", input="long", background=True)
    deadline = time.monotonic() + 10
    while (row := stored(server, queued.id)) is None or row.status != "in_progress":
        assert time.monotonic() < deadline, "the background run did not start"
        time.sleep(0.05)
    time.sleep(0.5)  # some output produced
    cancelled = client.responses.cancel(queued.id)
    assert cancelled.status == "cancelled"
    assert client.responses.retrieve(queued.id).status == "cancelled"
    deadline = time.monotonic() + 10
    while (row := stored(server, queued.id)) is None or row.cost_micros is None:
        assert time.monotonic() < deadline, "the cancelled run's cost was not recorded"
        time.sleep(0.05)
    assert row.cost_micros > 0
    again = client.responses.cancel(queued.id)
    assert again.status == "cancelled"


def test_retention_is_the_configured_default_or_the_key_s_own(client: openai.OpenAI, server: GatewayServer) -> None:
    default = stored(server, client.responses.create(model="echo-model", input="kept").id)
    assert default is not None and default.expires_at == pytest.approx(default.created_at + 30 * 86_400)
    admin = Admin(server.url, server.master_key)
    short = admin.create_key(scopes=["chat"], credits_micros=10**6, metadata={"responses_retention_days": 1})["key"]
    admin.close()
    with openai.OpenAI(base_url=server.base_url, api_key=short, max_retries=0) as own:
        row = stored(server, own.responses.create(model="echo-model", input="brief").id)
    assert row is not None and row.expires_at == pytest.approx(row.created_at + 86_400)


def test_a_background_response_the_upstream_fails_ends_failed_and_uncharged(
    client: openai.OpenAI, server: GatewayServer
) -> None:
    queued = client.responses.create(model="error-400", input="x", background=True)
    failed = _wait(client, queued.id, ("failed",))
    assert failed.error is not None and failed.output == []
    events = list(client.responses.retrieve(queued.id, stream=True))
    kinds = ["response.created", "response.queued", "response.in_progress", "response.failed"]
    assert [e.type for e in events] == kinds and [e.sequence_number for e in events] == [0, 1, 2, 3]
    row = stored(server, queued.id)
    assert row is not None and not row.cost_micros
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="echo-model", input="x", previous_response_id=queued.id)
    assert refused.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_deleting_a_response_mid_chain_breaks_none_of_the_later_ones(
    client: openai.OpenAI, fake_openai: FakeOpenAI
) -> None:
    first = client.responses.create(model="echo-model", input="alpha")
    second = client.responses.create(model="echo-model", input="beta", previous_response_id=first.id)
    client.responses.delete(first.id)
    third = client.responses.create(model="echo-model", input="gamma", previous_response_id=second.id)
    assert third.output_text == "echo: gamma"
    sent = fake_openai.state.last().body["messages"]
    assert len(sent) == 5 and sent[0]["content"] in ("alpha", [{"type": "text", "text": "alpha"}])
