"""The image routes through the official `openai` SDK, on every provider kind behind strict fakes."""

from __future__ import annotations

import base64
import time
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.openai_images_upstream import png
from tests.gateway_server import GatewayServer

PNG = png(b"input")
MASK = png(b"mask")


def _bytes(item: Any) -> bytes:
    return base64.b64decode(item.b64_json)


def test_b64_json_comes_inline_and_the_provider_url_is_fetched_server_side(
    client: openai.OpenAI, fakes: dict[str, Any]
) -> None:
    fake = fakes["openai"]
    result = client.images.generate(model="dall-e-2", prompt="an otter", size="256x256", response_format="b64_json")
    assert len(result.data) == 1 and result.data[0].url is None
    assert _bytes(result.data[0]) == fake.produced[-1]
    sent = fake.last("/images/generations").body
    assert sent == {"model": "dall-e-2", "prompt": "an otter", "size": "256x256"}  # response_format is ours


def test_url_is_the_gateways_signed_url_and_downloads_the_same_bytes(
    client: openai.OpenAI, fakes: dict[str, Any], gateway: GatewayServer
) -> None:
    result = client.images.generate(model="gpt-image-1", prompt="a heron", response_format="url", quality="low")
    url = result.data[0].url
    assert url is not None and url.startswith(gateway.url + "/v1/media/file-") and "signature=" in url
    assert result.data[0].b64_json is None
    downloaded = httpx.get(url, timeout=10)
    assert downloaded.status_code == 200
    assert downloaded.content == fakes["openai"].produced[-1]
    assert httpx.get(url.replace("signature=", "signature=0"), timeout=10).status_code == 403


def test_dall_e_answers_a_url_by_default_never_the_providers(
    client: openai.OpenAI, fakes: dict[str, Any], gateway: GatewayServer
) -> None:
    result = client.images.generate(model="dall-e-2", prompt="a fox")
    url = result.data[0].url
    assert url is not None and url.startswith(gateway.url) and "localhost" not in url
    assert httpx.get(url, timeout=10).content == fakes["openai"].produced[-1]


def test_n_above_the_models_cap_is_several_calls(client: openai.OpenAI, fakes: dict[str, Any]) -> None:
    fake = fakes["openai"]
    before = len(fake.requests)
    raw = client.images.with_raw_response.generate(
        model="dall-e-3", prompt="three owls", n=3, size="1792x1024", quality="hd", response_format="b64_json"
    )
    result = raw.parse()
    calls = fake.requests[before:]
    assert len(calls) == 3 and all(c.body.get("n", 1) == 1 for c in calls)
    assert {c.body["size"] for c in calls} == {"1792x1024"} and {c.body["quality"] for c in calls} == {"hd"}
    assert [_bytes(d) for d in result.data] == fake.produced[-3:]
    assert all(d.revised_prompt == "revised: three owls" for d in result.data)
    assert "x-inferplex-dropped-params" not in raw.headers


def test_gpt_image_size_quality_and_usage(client: openai.OpenAI, fakes: dict[str, Any]) -> None:
    result = client.images.generate(model="gpt-image-1", prompt="a red kite", n=2, size="1536x1024", quality="high")
    assert len(result.data) == 2 and result.size == "1536x1024" and result.quality == "high"
    assert result.usage is not None and result.usage.output_tokens == 2 * 6240
    assert fakes["openai"].last("/images/generations").body["n"] == 2


def test_stream_with_partial_images_answers_openais_events_in_order(client: openai.OpenAI) -> None:
    stream = client.images.generate(model="gpt-image-1", prompt="a lighthouse", stream=True, partial_images=2)
    events = list(stream)
    assert [e.type for e in events] == [
        "image_generation.partial_image",
        "image_generation.partial_image",
        "image_generation.completed",
    ]
    assert [getattr(e, "partial_image_index", None) for e in events[:2]] == [0, 1]
    done = events[-1]
    assert done.usage.output_tokens == 1056 and base64.b64decode(done.b64_json).startswith(b"\x89PNG")


def test_a_stream_on_a_provider_without_partial_images_names_them_dropped(gateway: GatewayServer) -> None:
    body = {"model": "imagen", "prompt": "a dune", "stream": True, "partial_images": 2, "n": 1}
    with httpx.stream("POST", gateway.base_url + "/images/generations", json=body, headers=gateway.auth) as r:
        text = r.read().decode()
    assert r.status_code == 200 and r.headers["x-inferplex-dropped-params"] == "partial_images"
    assert "event: image_generation.completed" in text and "partial_image\n" not in text


def test_a_parameter_the_model_lacks_is_dropped_and_named_or_refused(client: openai.OpenAI) -> None:
    raw = client.images.with_raw_response.generate(model="gpt-image-1", prompt="a cat", style="vivid")
    assert raw.headers["x-inferplex-dropped-params"] == "style"
    with pytest.raises(openai.BadRequestError) as refused:
        client.images.generate(model="gpt-image-1", prompt="a cat", style="vivid", extra_body={"drop_params": False})
    assert refused.value.body["param"] == "style"  # type: ignore[index]


def test_edit_with_image_and_mask(client: openai.OpenAI, fakes: dict[str, Any]) -> None:
    result = client.images.edit(
        model="gpt-image-1", image=("in.png", PNG, "image/png"), mask=("mask.png", MASK, "image/png"),
        prompt="add a hat", quality="low",
    )  # fmt: skip
    assert _bytes(result.data[0]) == fakes["openai"].produced[-1]
    sent = fakes["openai"].last("/images/edits").body
    assert sent["image"] == "<file>" and sent["mask"] == "<file>" and sent["prompt"] == "add a hat"
    assert result.usage is not None and result.usage.input_tokens_details.image_tokens == 323


def test_edit_with_several_images(client: openai.OpenAI, fakes: dict[str, Any]) -> None:
    images = [("a.png", PNG, "image/png"), ("b.png", png(b"b"), "image/png")]
    result = client.images.edit(model="gpt-image-1", image=images, prompt="combine them")
    assert len(result.data) == 1
    assert fakes["openai"].last("/images/edits").body["image[]"] == "<file>"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the SDK marks create_variation deprecated
def test_variation(client: openai.OpenAI, fakes: dict[str, Any]) -> None:
    result = client.images.create_variation(
        model="dall-e-2", image=("in.png", PNG, "image/png"), n=2, size="512x512", response_format="b64_json"
    )
    assert [_bytes(d) for d in result.data] == fakes["openai"].produced[-2:]
    assert fakes["openai"].last("/images/variations").body == {
        "model": "dall-e-2", "n": "2", "size": "512x512", "image": "<file>"
    }  # fmt: skip


def test_azure_deployments(client: openai.OpenAI, fakes: dict[str, Any]) -> None:
    fake = fakes["azure"]
    result = client.images.generate(model="azure-dall-e-3", prompt="a bay", response_format="b64_json")
    assert _bytes(result.data[0]) == fake.produced[-1]
    last = fake.last("/images/generations")
    assert last.path == "/openai/deployments/dall-e-3/images/generations"
    assert last.query["api-version"] == "2025-04-01-preview" and last.headers["api-key"] == "azure-fake-images"
    edited = client.images.edit(model="azure-gpt-image", image=("in.png", PNG, "image/png"), prompt="snow")
    assert _bytes(edited.data[0]) == fake.produced[-1]


def test_imagen_through_the_openai_route(client: openai.OpenAI, fakes: dict[str, Any]) -> None:
    fake = fakes["imagen"]
    before = len(fake.requests)
    raw = client.images.with_raw_response.generate(
        model="imagen", prompt="a glacier", n=5, size="1024x768", quality="hd", output_format="jpeg"
    )
    result = raw.parse()
    assert [_bytes(d) for d in result.data] == fake.produced[-5:]
    counts = sorted(r.body["parameters"]["sampleCount"] for r in fake.requests[before:])
    assert counts == [1, 4]  # Imagen makes at most 4 a call
    params = fake.requests[-1].body["parameters"]
    assert params["aspectRatio"] == "4:3" and params["outputOptions"] == {"mimeType": "image/jpeg"}
    assert raw.headers["x-inferplex-dropped-params"] == "quality"
    with pytest.raises(openai.BadRequestError) as refused:
        client.images.generate(model="imagen", prompt="a glacier", size="1536x1024")
    assert refused.value.body["param"] == "size"  # type: ignore[index]


def test_imagen_filtered_and_no_edits(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as filtered:
        client.images.generate(model="imagen", prompt="something blocked")
    assert "filter" in filtered.value.message
    with pytest.raises(openai.BadRequestError) as edit:
        client.images.edit(model="imagen", image=("in.png", PNG, "image/png"), prompt="x")
    assert "cannot edit images" in edit.value.message


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_bedrock_titan_nova_and_stability(client: openai.OpenAI, fakes: dict[str, Any]) -> None:
    fake = fakes["bedrock"]
    raw = client.images.with_raw_response.generate(
        model="titan", prompt="a canyon", n=2, size="1024x1024", quality="hd", background="transparent"
    )
    result = raw.parse()
    assert [_bytes(d) for d in result.data] == fake.produced[-2:]
    sent = fake.last("/invoke")
    assert sent.path == "/model/amazon.titan-image-generator-v2:0/invoke"
    assert sent.body == {
        "taskType": "TEXT_IMAGE",
        "textToImageParams": {"text": "a canyon"},
        "imageGenerationConfig": {"numberOfImages": 2, "width": 1024, "height": 1024, "quality": "premium"},
    }
    assert sent.headers["Authorization"].startswith("AWS4-HMAC-SHA256 ")
    assert raw.headers["x-inferplex-dropped-params"] == "background"
    nova = client.images.generate(model="nova-canvas", prompt="a reef", n=7, size="1280x720", response_format="url")
    assert len(nova.data) == 7  # 5 + 2
    assert [httpx.get(str(d.url), timeout=10).content for d in nova.data] == fake.produced[-7:]
    sd = client.images.generate(model="sd35", prompt="a moor", n=2, size="1536x1024", output_format="jpeg")
    assert len(sd.data) == 2 and fake.last("/invoke").body == {
        "prompt": "a moor", "mode": "text-to-image", "aspect_ratio": "3:2", "output_format": "jpeg"
    }  # fmt: skip
    varied = client.images.create_variation(model="titan", image=("in.png", PNG, "image/png"))
    assert fake.last("/invoke").body["taskType"] == "IMAGE_VARIATION" and len(varied.data) == 1


def test_a_bedrock_size_it_cannot_make_is_its_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.images.generate(model="titan", prompt="a canyon", size="1000x1000")
    assert "1000x1000" in refused.value.message


def test_an_edit_streams_openais_image_edit_events(client: openai.OpenAI, fakes: dict[str, Any]) -> None:
    stream = client.images.edit(
        model="gpt-image-1", image=("in.png", PNG, "image/png"), prompt="a scarf", stream=True, partial_images=1
    )
    events = list(stream)
    assert [e.type for e in events] == ["image_edit.partial_image", "image_edit.completed"]
    assert base64.b64decode(events[-1].b64_json) == fakes["openai"].produced[-1]
    sent = fakes["openai"].last("/images/edits").body
    assert sent["stream"] == "true" and sent["partial_images"] == "1"


def test_gemini_image_model_generates_and_edits_through_generate_content(
    client: openai.OpenAI, fakes: dict[str, Any]
) -> None:
    fake = fakes["imagen"]
    raw = client.images.with_raw_response.generate(model="gemini-image", prompt="a tram", n=2, size="1536x1024")
    result = raw.parse()
    assert [_bytes(d) for d in result.data] == fake.produced[-2:]
    sent = fake.last(":generateContent").body
    assert sent["generationConfig"] == {"responseModalities": ["IMAGE"], "imageConfig": {"aspectRatio": "3:2"}}
    assert result.usage is not None and result.usage.output_tokens == 2 * 1290
    edited = client.images.with_raw_response.edit(
        model="gemini-image", image=("in.png", PNG, "image/png"), mask=("m.png", MASK, "image/png"), prompt="rain"
    )
    assert edited.headers["x-inferplex-dropped-params"] == "mask"
    parts = fake.last(":generateContent").body["contents"][0]["parts"]
    assert parts[0] == {"text": "rain"} and base64.b64decode(parts[1]["inlineData"]["data"]) == PNG
    assert edited.parse().usage.input_tokens_details.image_tokens == 258  # type: ignore[union-attr]


def test_together_and_fireworks_images(client: openai.OpenAI, fakes: dict[str, Any]) -> None:
    fake = fakes["vendor"]
    raw = client.images.with_raw_response.generate(
        model="flux-together", prompt="a pier", n=2, size="1024x768", quality="high", response_format="b64_json"
    )
    assert [_bytes(d) for d in raw.parse().data] == fake.produced[-2:]
    assert fake.last("/images/generations").body == {
        "model": "black-forest-labs/FLUX.1-schnell", "prompt": "a pier", "n": 2, "width": 1024, "height": 768
    }  # fmt: skip
    assert raw.headers["x-inferplex-dropped-params"] == "quality"
    result = client.images.generate(model="flux-fireworks", prompt="a mill", n=2, size="1536x1024")
    assert [_bytes(d) for d in result.data] == fake.produced[-2:]
    last = fake.last("/text_to_image")
    assert last.path.endswith("/workflows/accounts/fireworks/models/flux-1-schnell-fp8/text_to_image")
    assert last.body == {"prompt": "a mill", "aspect_ratio": "3:2"} and last.headers["Accept"] == "image/png"


def test_partial_images_reach_the_caller_before_the_final_image_is_made(
    gateway: GatewayServer, fakes: dict[str, Any]
) -> None:
    fakes["openai"].slow_stream = 0.6
    body = {"model": "gpt-image-1", "prompt": "a slow heron", "stream": True, "partial_images": 2}
    seen: list[tuple[str, float]] = []
    try:
        with httpx.stream("POST", gateway.base_url + "/images/generations", json=body, headers=gateway.auth) as r:
            for line in r.iter_lines():
                if line.startswith("event: "):
                    seen.append((line.removeprefix("event: "), time.monotonic()))
    finally:
        fakes["openai"].slow_stream = 0.0
    kinds = [k for k, _ in seen]
    assert kinds == ["image_generation.partial_image"] * 2 + ["image_generation.completed"]
    assert seen[-1][1] - seen[0][1] >= 0.5  # the partials were sent as they came, not with the final image
