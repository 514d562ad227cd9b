"""Files uploaded to the gateway (`/v1/files`) named by `file_id` in a Responses input (responses_api/files.py).

The pure half as tables: which parts name a file and where (`wanted`), and the items rewritten to carry the
file inline (`inline`). Then through a real gateway with the official `openai` SDK: a PDF and an image
uploaded by the caller reach each kind of upstream inline (Anthropic's document block, Gemini's inlineData,
chat's file part, the native pass-through's `input_file`), buffered, streamed and in the background; a
follow-up by `previous_response_id` reads the file again while the stored items keep the id as sent; and a
file that cannot be sent (unknown, another owner's, too big, not an image where one is wanted, deleted
since) is a 400 naming its place, with nothing sent upstream.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from inferplex.errors import InvalidRequest
from inferplex.responses_api import files
from tests.accounts.conftest import Admin, billing_config
from tests.fakes.anthropic_upstream import FakeAnthropic
from tests.gateway_server import GatewayServer
from tests.responses_api.upstreams import (  # noqa: F401 (fixtures)
    Fakes,
    _native_keys,
    fake_anthropic,
    fake_bedrock,
    fake_gemini,
    fake_openai,
    fakes_fixture,
)

PDF = b"%PDF-1.4\n%%EOF"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
LIMIT = 4096  # the test gateway's `responses.max_inline_file_bytes`
PDF_URL = "data:application/pdf;base64," + base64.b64encode(PDF).decode()
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


# ---- the pure half ----------------------------------------------------------------------------------------


def message(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read it"}, *parts]}


WANTED: list[tuple[str, list[tuple[dict[str, Any], str]], dict[str, files.Place]]] = [
    ("a file by id", [(message({"type": "input_file", "file_id": "file-a"}), "input[0]")],
     {"file-a": files.Place("input[0].content[1].file_id", image=False)}),
    ("an image by id", [(message({"type": "input_image", "file_id": "file-b"}), "input[2]")],
     {"file-b": files.Place("input[2].content[1].file_id", image=True)}),
    ("data carried: nothing to read", [(message(
        {"type": "input_file", "file_id": "file-a", "file_data": PDF_URL},
        {"type": "input_image", "file_id": "file-b", "image_url": PNG_URL},
    ), "input[0]")], {}),
    ("the first place names it", [
        (message({"type": "input_file", "file_id": "file-a"}), "input[0]"),
        (message({"type": "input_file", "file_id": "file-a"}), "input[1]"),
    ], {"file-a": files.Place("input[0].content[1].file_id", image=False)}),
    ("an image place wins (it wants more)", [
        (message({"type": "input_file", "file_id": "file-a"}), "input[0]"),
        (message({"type": "input_image", "file_id": "file-a"}), "input[1]"),
    ], {"file-a": files.Place("input[1].content[1].file_id", image=True)}),
    ("the history is named as a whole",
     [(message({"type": "input_file", "file_id": "file-a"}), "previous_response_id")],
     {"file-a": files.Place("previous_response_id", image=False)}),
    ("not a message: skipped", [({"type": "function_call_output", "call_id": "c", "output": "x"}, "input[0]")], {}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "items", "expected"), WANTED, ids=[w[0] for w in WANTED])
def test_wanted(name: str, items: list[tuple[dict[str, Any], str]], expected: dict[str, files.Place]) -> None:
    assert files.wanted(items) == expected


READ = {
    "file-a": files.Inlined(PDF_URL, "a.pdf", "application/pdf"),
    "file-b": files.Inlined(PNG_URL, "b.png", "image/png"),
}
INLINE: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("a file: its data and name", {"type": "input_file", "file_id": "file-a"},
     {"type": "input_file", "file_data": PDF_URL, "filename": "a.pdf"}),
    ("the caller's filename kept", {"type": "input_file", "file_id": "file-a", "filename": "mine.pdf"},
     {"type": "input_file", "file_data": PDF_URL, "filename": "mine.pdf"}),
    ("an image: a data URL, its detail kept", {"type": "input_image", "file_id": "file-b", "detail": "low"},
     {"type": "input_image", "image_url": PNG_URL, "detail": "low"}),
    ("a file not read: as it is", {"type": "input_file", "file_id": "file-z"},
     {"type": "input_file", "file_id": "file-z"}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "part", "expected"), INLINE, ids=[c[0] for c in INLINE])
def test_inline(name: str, part: dict[str, Any], expected: dict[str, Any]) -> None:
    items = [message(part)]
    out = files.inline(items, READ, "input")
    assert out[0]["content"] == [{"type": "input_text", "text": "read it"}, expected]
    assert items == [message(part)]  # the caller's items (stored as sent) are left alone


def test_inline_refuses_an_image_part_naming_no_image() -> None:
    with pytest.raises(InvalidRequest) as err:
        files.inline([message({"type": "input_image", "file_id": "file-a"})], READ, "input")
    assert err.value.param == "input[0].content[1].file_id"


# ---- through a gateway --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(fakes: Fakes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    config = billing_config(
        fakes.openai,
        tmp_path_factory.mktemp("files-input"),
        responses={"max_inline_file_bytes": LIMIT, "tick_s": 0.2, "follow_poll_s": 0.02},
    )
    config["providers"] += [
        {"name": "claude", "kind": "anthropic", "base_url": fakes.anthropic.url, "api_key": "env:FAKE_ANTHROPIC_KEY"},
        {"name": "gem", "kind": "gemini", "base_url": fakes.gemini.url + "/v1beta", "api_key": "env:FAKE_GEMINI_KEY"},
        {
            "name": "oa-native",
            "kind": "openai",
            "base_url": fakes.openai.base_url,
            "api_key": "env:FAKE_UPSTREAM_KEY",
            "options": {"responses_api": True},
        },
    ]
    upstreams = {"claude": "claude-echo-1", "gem": "gemini-echo", "fake": "gpt-echo", "oa-native": "gpt-echo"}
    config["models"] += [
        {
            "name": f"{provider}-files",
            "deployments": [{"provider": provider, "model": upstream}],
            "capabilities": {"vision": True},
        }
        for provider, upstream in upstreams.items()
    ]
    with GatewayServer(config) as server:
        yield server


def new_key(gateway: GatewayServer) -> str:
    admin = Admin(gateway.url, gateway.master_key)
    key: str = admin.create_key(scopes=["chat"], credits_micros=10**7)["key"]
    admin.close()
    return key


@pytest.fixture(scope="module")
def keys(gateway: GatewayServer) -> tuple[str, str]:
    """Two keys of two accounts: the caller's, and another owner's."""
    return new_key(gateway), new_key(gateway)


@pytest.fixture
def client(gateway: GatewayServer, keys: tuple[str, str]) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.base_url, api_key=keys[0], max_retries=0) as c:
        yield c


def upload(client: openai.OpenAI, name: str, data: bytes, purpose: Any = "user_data") -> str:
    return client.files.create(file=(name, data), purpose=purpose).id


def asking(*parts: dict[str, Any]) -> list[Any]:
    return [message(*parts)]


def anthropic_blocks(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [b for m in fake.last("/v1/messages").body["messages"] for b in m["content"] if isinstance(b, dict)]


def test_a_pdf_reaches_each_kind_of_upstream_inline(client: openai.OpenAI, fakes: Fakes) -> None:
    file_id = upload(client, "a.pdf", PDF)
    part = {"type": "input_file", "file_id": file_id}
    data = base64.b64encode(PDF).decode()

    client.responses.create(model="claude-files", input=asking(part))
    document = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}}
    assert document in anthropic_blocks(fakes.anthropic)

    client.responses.create(model="gem-files", input=asking(part))
    parts = fakes.gemini.last().body["contents"][-1]["parts"]
    assert {"inlineData": {"mimeType": "application/pdf", "data": data}} in parts

    client.responses.create(model="fake-files", input=asking(part))
    sent = fakes.openai.state.last().body["messages"][-1]["content"]
    assert {"type": "file", "file": {"file_data": PDF_URL, "filename": "a.pdf"}} in sent

    client.responses.create(model="oa-native-files", input=asking(part))
    sent = fakes.openai.state.last("/responses").body["input"][-1]["content"]
    assert {"type": "input_file", "file_data": PDF_URL, "filename": "a.pdf"} in sent


def test_an_image_by_file_id_goes_as_a_data_url(client: openai.OpenAI, fakes: Fakes) -> None:
    file_id = upload(client, "b.png", PNG, purpose="vision")
    client.responses.create(model="claude-files", input=asking({"type": "input_image", "file_id": file_id}))
    source = {"type": "base64", "media_type": "image/png", "data": base64.b64encode(PNG).decode()}
    assert {"type": "image", "source": source} in anthropic_blocks(fakes.anthropic)


def test_streamed_and_background_runs_read_it_too(client: openai.OpenAI, fakes: Fakes) -> None:
    file_id = upload(client, "a.pdf", PDF)
    part = {"type": "input_file", "file_id": file_id}
    with client.responses.stream(model="claude-files", input=asking(part)) as stream:
        assert stream.get_final_response().status == "completed"
    assert any(b["type"] == "document" for b in anthropic_blocks(fakes.anthropic))
    queued = client.responses.create(model="claude-files", input=asking(part), background=True)
    deadline = time.monotonic() + 20
    while (done := client.responses.retrieve(queued.id)).status in ("queued", "in_progress"):
        assert time.monotonic() < deadline, "the background run did not finish"
        time.sleep(0.05)
    assert done.status == "completed", done.error
    assert any(b["type"] == "document" for b in anthropic_blocks(fakes.anthropic))


def test_a_follow_up_reads_the_file_again_and_the_items_keep_its_id(client: openai.OpenAI, fakes: Fakes) -> None:
    file_id = upload(client, "a.pdf", PDF)
    part = {"type": "input_file", "file_id": file_id}
    first = client.responses.create(model="claude-files", input=asking(part))
    listed = client.responses.input_items.list(first.id).data[0].model_dump(exclude_none=True)
    assert listed["content"][1] == part
    client.responses.create(model="claude-files", previous_response_id=first.id, input="and now?")
    assert any(b["type"] == "document" for b in anthropic_blocks(fakes.anthropic))
    client.files.delete(file_id)
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(model="claude-files", previous_response_id=first.id, input="again?")
    assert err.value.body["param"] == "previous_response_id"  # type: ignore[index]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", ["unknown", "another owner's", "too big", "not an image"])
def test_a_file_that_cannot_be_sent_is_a_400_naming_its_place(
    gateway: GatewayServer,
    client: openai.OpenAI,
    keys: tuple[str, str],
    fakes: Fakes,
    case: str,
    stream: bool,
) -> None:
    part: dict[str, Any] = {"type": "input_file", "file_id": "file-000000000000000000000000"}
    if case == "another owner's":
        with openai.OpenAI(base_url=gateway.base_url, api_key=keys[1], max_retries=0) as other:
            part["file_id"] = upload(other, "a.pdf", PDF)
    elif case == "too big":
        part["file_id"] = upload(client, "big.pdf", PDF + b" " * LIMIT)
    elif case == "not an image":
        part = {"type": "input_image", "file_id": upload(client, "a.pdf", PDF)}
    calls = len(fakes.anthropic.requests)
    body = {"model": "claude-files", "input": [message({"type": "input_text", "text": "x"}, part)], "stream": stream}
    r = httpx.post(gateway.base_url + "/responses", json=body, headers={"Authorization": f"Bearer {keys[0]}"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "input[0].content[2].file_id", r.json()
    assert len(fakes.anthropic.requests) == calls  # nothing went upstream


def test_without_a_media_store_a_file_id_is_refused_by_its_place() -> None:
    places = {"file-a": files.Place("input[0].content[1].file_id", image=False)}
    with pytest.raises(InvalidRequest) as err:
        asyncio.run(files.resolve(None, "owner", places, LIMIT))
    assert err.value.param == "input[0].content[1].file_id"
