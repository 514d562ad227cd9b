"""`/v1/videos` over raw HTTP: malformed and refused requests answer OpenAI's error object with a 4xx, never a
5xx; multipart creates carry the reference image to the provider; nothing refused costs anything."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from tests.accounts.conftest import Admin
from tests.fakes.openai_videos_upstream import FakeSora
from tests.gateway_server import GatewayServer
from tests.media.videos.conftest import balance, new_key, wait_for

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 64


def _headers(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body: dict[str, Any] = r.json()["error"]
    assert set(body) == {"message", "type", "param", "code"}
    return body


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "sora-2"}, "prompt"),
        ({"prompt": "x", "seconds": 8}, "seconds"),
        ({"prompt": "x", "seconds": "0"}, "seconds"),
        ({"prompt": "x", "seconds": "9999"}, "seconds"),
        ({"prompt": "x", "size": "big"}, "size"),
        ({"prompt": "", "model": "sora-2"}, "prompt"),
        ({"prompt": "x", "colour": "red"}, "colour"),
        ({"prompt": "x", "input_reference": {"image_url": "https://a/b.png", "file_id": "file-1"}}, "input_reference"),
    ],
)
def test_malformed_creates_are_400_naming_the_field(
    server: GatewayServer, admin: Admin, sora: FakeSora, body: dict[str, Any], param: str
) -> None:
    key, account = new_key(admin)
    r = httpx.post(f"{server.base_url}/videos", json=body, headers=_headers(key))
    assert _error(r, 400)["param"] == param
    assert sora.created == [] and balance(admin, account) == 50_000_000


def test_a_size_the_provider_refuses_is_its_400_and_costs_nothing(
    server: GatewayServer, admin: Admin, sora: FakeSora
) -> None:
    key, account = new_key(admin)
    r = httpx.post(f"{server.base_url}/videos", json={"prompt": "x", "size": "1792x1024"}, headers=_headers(key))
    err = _error(r, 400)
    assert "not supported by sora-2" in err["message"]
    wait_for(lambda: balance(admin, account) == 50_000_000)
    listed = httpx.get(f"{server.base_url}/videos", headers=_headers(key)).json()
    assert listed["data"] == [] and listed["has_more"] is False  # the refused job left no row


def test_refusals_in_openai_shape(server: GatewayServer, admin: Admin, sora: FakeSora) -> None:
    key, _ = new_key(admin)
    url = f"{server.base_url}/videos"
    assert _error(httpx.post(url, content=b"prompt=x", headers={**_headers(key), "content-type": "text/plain"}), 415)
    assert (
        _error(httpx.post(url, json={"prompt": "x", "model": "nope"}, headers=_headers(key)), 404)["param"] == "model"
    )
    chat_only, _ = new_key(admin, scopes=["chat"])
    assert _error(httpx.post(url, json={"prompt": "x"}, headers=_headers(chat_only)), 403)
    assert _error(httpx.get(f"{url}/video_missing", headers=_headers(key)), 404)["code"] == "video_not_found"
    assert _error(httpx.get(f"{url}/not-a-video-id/content", headers=_headers(key)), 404)
    assert _error(httpx.delete(f"{url}/video_missing", headers=_headers(key)), 404)
    assert _error(httpx.get(url, params={"limit": "101"}, headers=_headers(key)), 400)["param"] == "limit"
    assert _error(httpx.get(url, params={"order": "up"}, headers=_headers(key)), 400)["param"] == "order"
    assert _error(httpx.post(f"{url}/video_missing/remix", json={"prompt": "x"}, headers=_headers(key)), 404)
    assert _error(httpx.post(f"{url}/video_missing/remix", json={"prompt": 3}, headers=_headers(key)), 400)
    assert _error(httpx.get(url), 401)


def test_content_before_completion_and_bad_variants(server: GatewayServer, admin: Admin, sora: FakeSora) -> None:
    sora.polls_needed = 10_000
    key, _ = new_key(admin)
    video = httpx.post(f"{server.base_url}/videos", json={"prompt": "slow"}, headers=_headers(key)).json()
    content = f"{server.base_url}/videos/{video['id']}/content"
    assert _error(httpx.get(content, headers=_headers(key)), 400)["code"] == "video_not_ready"
    assert _error(httpx.get(content, params={"variant": "poster"}, headers=_headers(key)), 400)["param"] == "variant"
    assert _error(httpx.post(f"{server.base_url}/videos/{video['id']}/remix", json={"prompt": "y"},
                             headers=_headers(key)), 400)["code"] == "video_not_ready"  # fmt: skip
    retrieved = httpx.get(f"{server.base_url}/videos/{video['id']}", headers=_headers(key))
    assert int(retrieved.headers["openai-poll-after-ms"]) >= 100


def test_multipart_create_sends_the_reference_image(server: GatewayServer, admin: Admin, sora: FakeSora) -> None:
    key, _ = new_key(admin)
    fields = {"prompt": "animate this", "model": "sora-2", "seconds": "4", "size": "1280x720"}
    files = {"input_reference": ("ref.png", PNG, "image/png")}
    r = httpx.post(f"{server.base_url}/videos", data=fields, files=files, headers=_headers(key))
    assert r.status_code == 200, r.text
    assert r.json()["size"] == "1280x720"
    sent = sora.created[-1]["body"]
    assert sent["input_reference"] == {"upload": "image/png", "filename": "ref.png"}
    assert sent["prompt"] == "animate this" and sent["seconds"] == "4"


def test_multipart_reference_that_is_not_an_image_is_refused(
    server: GatewayServer, admin: Admin, sora: FakeSora
) -> None:
    key, account = new_key(admin)
    files = {"input_reference": ("ref.png", b"just some text, not a picture", "image/png")}
    r = httpx.post(f"{server.base_url}/videos", data={"prompt": "x"}, files=files, headers=_headers(key))
    assert r.status_code in (400, 415), r.text
    assert sora.created == [] and balance(admin, account) == 50_000_000


def test_a_job_deleted_while_it_is_submitted_is_released_once(
    server: GatewayServer, admin: Admin, sora: FakeSora
) -> None:
    """The caller lists the job while the provider is still taking it, deletes it, then the provider fails the
    submit: the reservation is released once (by the delete), not once more by the failed request."""
    sora.create_delay_s, sora.create_error = 0.5, 500
    key, account = new_key(admin)
    url = f"{server.base_url}/videos"
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            lambda: httpx.post(url, json={"prompt": "racing", "seconds": "12"}, headers=_headers(key), timeout=30)
        )
        (listed,) = wait_for(lambda: httpx.get(url, headers=_headers(key)).json()["data"])
        assert listed["status"] == "queued"
        assert httpx.delete(f"{url}/{listed['id']}", headers=_headers(key)).json()["deleted"] is True
        answer = pending.result()
    assert _error(answer, 502)
    wait_for(lambda: balance(admin, account) == 50_000_000)
    kinds = [row["kind"] for row in admin.ledger(account)]
    assert kinds.count("reserve") == 1 and kinds.count("settle") == 1
    assert balance(admin, account) == 50_000_000
