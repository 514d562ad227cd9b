"""Bad input to the image routes: a clean 4xx in OpenAI's error shape, never a 500."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.fakes.openai_images_upstream import png
from tests.gateway_server import GatewayServer


def _post(gateway: GatewayServer, path: str, headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
    return httpx.post(gateway.base_url + path, headers={**gateway.auth, **(headers or {})}, timeout=10, **kw)


def test_bad_size_names_size(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.images.generate(model="dall-e-2", prompt="x", size="huge")  # type: ignore[arg-type]
    assert bad.value.body["param"] == "size" and bad.value.body["type"] == "invalid_request_error"  # type: ignore[index]


def test_a_providers_400_is_mapped_with_its_message(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.images.generate(model="dall-e-3", prompt="x", size="512x512")
    assert "512x512" in bad.value.message


def test_a_provider_failing_is_a_5xx_in_openais_shape(gateway: GatewayServer) -> None:
    r = _post(gateway, "/images/generations", json={"model": "broken-images", "prompt": "x"})
    assert r.status_code in (502, 503) and r.json()["error"]["type"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "dall-e-2"}, "prompt"),
        ({"model": "dall-e-2", "prompt": "x", "n": 11}, "n"),
        ({"model": "dall-e-2", "prompt": "x", "n": "2"}, "n"),
        ({"model": "dall-e-2", "prompt": "x", "response_format": "gif"}, "response_format"),
        ({"model": "dall-e-2", "prompt": "x", "partial_images": 4}, "partial_images"),
        ({"model": "dall-e-2", "prompt": ""}, "prompt"),
    ],
)
def test_invalid_json_fields(gateway: GatewayServer, body: dict[str, Any], param: str) -> None:
    r = _post(gateway, "/images/generations", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


@pytest.mark.parametrize(
    ("content", "content_type", "status"),
    [
        (b"{not json", "application/json", 400),
        (b"[]", "application/json", 400),
        (b"prompt=x", "application/x-www-form-urlencoded", 415),
    ],
)
def test_malformed_json(gateway: GatewayServer, content: bytes, content_type: str, status: int) -> None:
    r = _post(gateway, "/images/generations", content=content, headers={**gateway.auth, "content-type": content_type})
    assert r.status_code == status and "error" in r.json()


def test_malformed_multipart(gateway: GatewayServer) -> None:
    broken = b'--b\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\n\r\n\x89PNG'
    headers = {**gateway.auth, "content-type": "multipart/form-data; boundary=b"}
    r = httpx.post(gateway.base_url + "/images/edits", content=broken, headers=headers, timeout=10)
    assert 400 <= r.status_code < 500 and "error" in r.json()
    r = httpx.post(gateway.base_url + "/images/edits", content=b"garbage", headers=headers, timeout=10)
    assert 400 <= r.status_code < 500
    r = _post(gateway, "/images/edits", json={"model": "gpt-image-1", "prompt": "x"})
    assert r.status_code == 415


def test_multipart_without_the_image_or_with_a_non_image(gateway: GatewayServer) -> None:
    r = _post(gateway, "/images/edits", data={"model": "gpt-image-1", "prompt": "x"}, files={"unused": ("a", b"")})
    assert 400 <= r.status_code < 500
    r = _post(gateway, "/images/edits", data={"model": "gpt-image-1", "prompt": "x"},
              files={"image": ("a.txt", b"hello there, not an image", "text/plain")})  # fmt: skip
    assert r.status_code in (400, 415) and r.json()["error"]["param"] == "image"
    r = _post(
        gateway, "/images/edits", data={"model": "gpt-image-1"}, files={"image": ("a.png", png(b"x"), "image/png")}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    r = _post(gateway, "/images/variations", data={"model": "dall-e-2", "n": "two"},
              files={"image": ("a.png", png(b"x"), "image/png")})  # fmt: skip
    assert r.status_code == 400 and r.json()["error"]["param"] == "n"


def test_a_stream_that_fails_before_its_first_event_is_an_error_answer(gateway: GatewayServer) -> None:
    body = {"model": "broken-images", "prompt": "x", "stream": True}
    r = _post(gateway, "/images/generations", json=body)
    assert r.status_code >= 500 and r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["type"]
