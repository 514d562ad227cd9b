"""OpenAI's Files API through the official `openai` SDK, against a gateway (on SQLite, on PostgreSQL, and with
its files in S3): upload (any type, `purpose`, `expires_after`), retrieve, content (and byte ranges),
list (purpose, order, paging), delete; every file its owner's; errors in OpenAI's shape (400 naming the
field, 413, 404)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import openai
import pytest

from inferplex.dialects.openai_files import BATCH_EXPIRY_S, expiry
from inferplex.errors import InvalidRequest
from tests.accounts.conftest import Admin, billing_config, own_database
from tests.fakes.moto_server import moto_server
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.test_openapi import _fits, _schema

MAX_UPLOAD = 256 * 1024  # above `server.max_body_bytes` (64 KiB in the test config): uploads have their own
RETENTION_S = 7 * 86400.0
JSONL = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {}}\n'


@pytest.fixture(scope="module", params=["sqlite", "postgresql", "s3"])
def server(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayServer]:
    """The gateway on SQLite, on a PostgreSQL database of its own (the list's query runs on both), and on
    SQLite with the files in S3 (moto's server)."""
    tmp = tmp_path_factory.mktemp("files-api")
    media: dict[str, Any] = {"max_upload_bytes": MAX_UPLOAD, "retention_s": RETENTION_S}
    with contextlib.ExitStack() as stack:
        database_url = stack.enter_context(own_database("inferplex_files_")) if request.param == "postgresql" else None
        if request.param == "s3":
            moto = stack.enter_context(moto_server())
            boto3.client("s3", endpoint_url=moto, region_name="us-east-1", aws_access_key_id="k",
                         aws_secret_access_key="s").create_bucket(Bucket="files")  # fmt: skip
            keys = {"access_key_id": "env:FILES_TEST_S3_KEY", "secret_access_key": "env:FILES_TEST_S3_SECRET"}
            media |= {"backend": "s3", "s3": {"endpoint_url": moto, "bucket": "files", **keys}}
            env = stack.enter_context(pytest.MonkeyPatch.context())
            env.setenv("FILES_TEST_S3_KEY", "k")
            env.setenv("FILES_TEST_S3_SECRET", "s")
        config = billing_config(fake_openai, tmp, database_url)
        config["media"] = media
        yield stack.enter_context(GatewayServer(config))


def client(server: GatewayServer, admin: Admin) -> openai.OpenAI:
    """A client with a key of its own (and an account of its own: files are the account's)."""
    key = admin.create_key(credits_micros=1_000_000)["key"]
    return openai.OpenAI(api_key=key, base_url=server.base_url, max_retries=0, timeout=30)


def test_upload_retrieve_download_and_delete_a_batch_file(server: GatewayServer, admin: Admin) -> None:
    c = client(server, admin)
    before = int(time.time())
    made = c.files.create(file=("requests.jsonl", JSONL, "application/jsonl"), purpose="batch")
    assert made.id.startswith("file-") and made.object == "file" and made.status == "processed"
    assert made.filename == "requests.jsonl" and made.bytes == len(JSONL) and made.purpose == "batch"
    assert before <= made.created_at <= int(time.time())
    assert made.expires_at == made.created_at + int(min(BATCH_EXPIRY_S, RETENTION_S))
    assert c.files.retrieve(made.id) == made
    assert c.files.content(made.id).content == JSONL
    assert made.id in [f.id for f in c.files.list()]
    deleted = c.files.delete(made.id)
    assert deleted.id == made.id and deleted.deleted and deleted.object == "file"
    with pytest.raises(openai.NotFoundError) as caught:
        c.files.retrieve(made.id)
    assert caught.value.body["code"] == "file_not_found"  # type: ignore[index]
    assert made.id not in [f.id for f in c.files.list()]
    with pytest.raises(openai.NotFoundError):
        c.files.delete(made.id)


def test_any_type_is_taken_as_declared_and_served_with_byte_ranges(server: GatewayServer, admin: Admin) -> None:
    c = client(server, admin)
    pdf = b"%PDF-1.4\n" + bytes(range(256)) * 4
    made = c.files.create(file=("report.pdf", pdf, "application/pdf"), purpose="user_data")
    assert made.purpose == "user_data" and made.bytes == len(pdf)
    answer = c.files.with_raw_response.content(made.id)
    assert answer.headers["content-type"] == "application/pdf" and answer.content == pdf
    ranged = httpx.get(
        f"{server.base_url}/files/{made.id}/content",
        headers={"Authorization": f"Bearer {c.api_key}", "Range": "bytes=9-18"},
    )
    assert ranged.status_code == 206 and ranged.content == pdf[9:19]
    assert ranged.headers["content-range"] == f"bytes 9-18/{len(pdf)}"


def test_expires_after_sets_the_expiry_within_the_stores_retention(server: GatewayServer, admin: Admin) -> None:
    c = client(server, admin)
    made = c.files.create(
        file=("a.jsonl", JSONL), purpose="batch", expires_after={"anchor": "created_at", "seconds": 3600}
    )
    assert made.expires_at == made.created_at + 3600
    longest = c.files.create(
        file=("b.jsonl", JSONL), purpose="evals", expires_after={"anchor": "created_at", "seconds": 2_592_000}
    )
    assert longest.expires_at == longest.created_at + int(RETENTION_S)  # the operator's retention bounds it


@pytest.mark.parametrize(
    ("purpose", "fields", "retention", "ttl"),
    [
        ("batch", {}, None, BATCH_EXPIRY_S),
        ("batch", {}, 3600.0, 3600.0),
        ("user_data", {}, None, None),  # the store's default retention
        ("vision", {"expires_after[anchor]": "created_at", "expires_after[seconds]": 7200}, None, 7200.0),
        ("vision", {"expires_after[anchor]": "created_at", "expires_after[seconds]": 7200}, 3600.0, 3600.0),
    ],
)
def test_expiry_table(purpose: str, fields: dict[str, object], retention: float | None, ttl: float | None) -> None:
    assert expiry(purpose, fields, retention) == ttl


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"expires_after[anchor]": "uploaded_at", "expires_after[seconds]": 7200}, "expires_after.anchor"),
        ({"expires_after[seconds]": 7200}, "expires_after.anchor"),
        ({"expires_after[anchor]": "created_at"}, "expires_after.seconds"),
        ({"expires_after[anchor]": "created_at", "expires_after[seconds]": 60}, "expires_after.seconds"),
        ({"expires_after[anchor]": "created_at", "expires_after[seconds]": 2_592_001}, "expires_after.seconds"),
    ],
)
def test_expiry_refuses_what_openai_refuses(fields: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        expiry("batch", fields, None)
    assert caught.value.param == param


def test_bad_uploads_are_400_or_413_in_openais_shape(server: GatewayServer, admin: Admin) -> None:
    c = client(server, admin)
    with pytest.raises(openai.BadRequestError) as caught:
        c.files.create(file=("a.jsonl", JSONL), purpose="fine-tune-results")  # type: ignore[arg-type]
    assert caught.value.body["param"] == "purpose"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as caught:
        c.files.create(file=("a.jsonl", JSONL), purpose="batch", expires_after={"anchor": "created_at", "seconds": 5})
    assert caught.value.body["param"] == "expires_after.seconds"  # type: ignore[index]
    bigger_than_a_json_body = c.files.create(file=("big.jsonl", b"x" * 100_000), purpose="batch")
    assert c.files.content(bigger_than_a_json_body.id).content == b"x" * 100_000
    with pytest.raises(openai.APIStatusError) as too_big:
        c.files.create(file=("big.jsonl", b"x" * (MAX_UPLOAD + 1)), purpose="batch")
    assert too_big.value.status_code == 413 and too_big.value.body["code"] == "request_too_large"  # type: ignore[index]
    headers = {"Authorization": f"Bearer {c.api_key}"}
    no_file = httpx.post(f"{server.base_url}/files", headers=headers, files={"purpose": (None, "batch")})
    assert no_file.status_code == 400 and no_file.json()["error"]["param"] == "file"
    no_purpose = httpx.post(f"{server.base_url}/files", headers=headers, files={"file": ("a.jsonl", JSONL)})
    assert no_purpose.status_code == 400 and no_purpose.json()["error"]["param"] == "purpose"
    as_json = httpx.post(f"{server.base_url}/files", headers=headers, json={"purpose": "batch"})
    assert as_json.status_code == 415 and "error" in as_json.json()


def test_another_owners_file_is_not_found_and_not_listed(server: GatewayServer, admin: Admin) -> None:
    mine, theirs = client(server, admin), client(server, admin)
    made = mine.files.create(file=("mine.jsonl", JSONL), purpose="batch")
    for call in (
        lambda: theirs.files.retrieve(made.id),
        lambda: theirs.files.content(made.id),
        lambda: theirs.files.delete(made.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert [f.id for f in theirs.files.list()] == []
    with pytest.raises(openai.BadRequestError) as caught:
        theirs.files.list(after=made.id)  # a cursor that is not the caller's
    assert caught.value.body["param"] == "after"  # type: ignore[index]
    assert mine.files.retrieve(made.id).id == made.id
    with pytest.raises(openai.NotFoundError):
        mine.files.retrieve("file-" + "0" * 24)


def test_list_filters_by_purpose_orders_and_pages(server: GatewayServer, admin: Admin) -> None:
    c = client(server, admin)
    batch = [c.files.create(file=(f"{i}.jsonl", JSONL), purpose="batch").id for i in range(5)]
    other = c.files.create(file=("notes.txt", b"notes", "text/plain"), purpose="user_data").id
    assert [f.id for f in c.files.list(purpose="batch", order="asc")] == batch
    assert [f.id for f in c.files.list(purpose="batch")] == batch[::-1]  # newest first by default
    assert [f.id for f in c.files.list(purpose="user_data")] == [other]
    first = c.files.list(purpose="batch", limit=2, order="asc")
    assert [f.id for f in first.data] == batch[:2] and first.has_more
    assert [f.id for f in c.files.list(purpose="batch", limit=2, order="asc")] == batch  # the SDK follows `after`
    assert [f.id for f in c.files.list(order="asc")] == [*batch, other]
    assert c.files.list(purpose="batch_output").data == []
    headers = {"Authorization": f"Bearer {c.api_key}"}
    for params, param in (
        ({"limit": "0"}, "limit"),
        ({"limit": "10001"}, "limit"),
        ({"order": "sideways"}, "order"),
        ({"purpose": "image"}, "purpose"),  # the gateway's other media are not Files API files
    ):
        r = httpx.get(f"{server.base_url}/files", params=params, headers=headers)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_the_files_routes_need_a_key(server: GatewayServer, tmp_path: Path) -> None:
    stranger = openai.OpenAI(api_key="ipx-not-a-key", base_url=server.base_url, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.files.list()
    with pytest.raises(openai.AuthenticationError):
        stranger.files.create(file=("a.jsonl", JSONL), purpose="batch")


def test_answers_fit_the_openapi_document(server: GatewayServer, admin: Admin) -> None:
    c = client(server, admin)
    headers = {"Authorization": f"Bearer {c.api_key}"}
    url = server.base_url + "/files"
    made = httpx.post(url, headers=headers, files={"file": ("a.jsonl", JSONL), "purpose": (None, "batch")})
    file_id = made.json()["id"]
    answers = [
        ("/v1/files", "post", made),
        ("/v1/files", "post", httpx.post(url, headers=headers, files={"purpose": (None, "batch")})),
        ("/v1/files", "get", httpx.get(url, headers=headers)),
        ("/v1/files/{file_id}", "get", httpx.get(f"{url}/{file_id}", headers=headers)),
        ("/v1/files/{file_id}", "get", httpx.get(f"{url}/file-nope", headers=headers)),
        ("/v1/files/{file_id}", "delete", httpx.delete(f"{url}/{file_id}", headers=headers)),
        ("/v1/files/{file_id}/content", "get", httpx.get(f"{url}/{file_id}/content", headers=headers)),
    ]
    for path, method, answer in answers:
        _fits(_schema(path, method, answer.status_code), answer.json())
