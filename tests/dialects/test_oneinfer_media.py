"""OneInfer's media routes (dialects/oneinfer_media.py) through a real gateway, with raw httpx (OneInfer
publishes no Python SDK), against the strict fakes of OpenAI's audio, images and Sora APIs: every route, its
envelope on success and on failure, its statuses, and seed 001's text-to-speech example on the chat route."""

from __future__ import annotations

import base64
import struct
import time
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from inferplex.dialects import oneinfer_media_responses as omr
from inferplex.dialects.oneinfer_media import video_size
from inferplex.dialects.oneinfer_responses import OneInferError, OneInferModelsEnvelope
from tests.accounts.conftest import Admin
from tests.fakes.openai_audio_upstream import SAID, FakeOpenAIAudio, fake_audio, wav_bytes
from tests.fakes.openai_images_upstream import FakeOpenAIImages
from tests.fakes.openai_videos_upstream import FakeSora
from tests.gateway_server import GatewayServer

KEYS = {"OIM_AUDIO_KEY": "sk-oim-audio", "OIM_IMAGES_KEY": "sk-oim-images", "OIM_SORA_KEY": "sk-oim-sora"}
SEED_001_SPEECH = {
    "provider": "openai",
    "model": "tts-1",
    "input": "OneInfer makes AI inference simple.",
    "voice": "nova",
    "response_format": "mp3",
    "speed": 1.0,
}
SEED_001_IMAGE = {
    "provider": "openai-images",  # seed 001 says "openai": here OpenAI's audio and images are two fakes
    "model": "dall-e-3",
    "prompt": "A futuristic city skyline at dusk, photorealistic",
    "n": 1,
    "size": "1024x1024",
    "quality": "standard",
}
VIDEO = {"provider": "sora", "model": "sora-2", "prompt": "A red fox running through a snowy forest",
         "resolution": "720P", "aspect_ratio": "16:9", "duration": 4, "fps": 24, "generate_audio": True}  # fmt: skip


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, Any]]:
    mp = pytest.MonkeyPatch()
    for name, value in KEYS.items():
        mp.setenv(name, value)
    started = {
        "audio": FakeOpenAIAudio("openai", KEYS["OIM_AUDIO_KEY"]).start(),
        "images": FakeOpenAIImages(KEYS["OIM_IMAGES_KEY"]).start(),
        "sora": FakeSora(keys={KEYS["OIM_SORA_KEY"]}, polls_needed=2).start(),
    }
    yield started
    for fake in started.values():
        fake.stop()
    mp.undo()


def _model(name: str, kind: str, provider: str, upstream: str, **pricing: Any) -> dict[str, Any]:
    return {"name": name, "type": kind, "deployments": [{"provider": provider, "model": upstream}], "pricing": pricing}


@pytest.fixture(scope="module")
def server(fakes: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    tmp = tmp_path_factory.mktemp("oneinfer-media")
    config = {
        "server": {"data_dir": str(tmp)},
        "storage": {"database_url": f"sqlite:///{tmp / 'inferplex.db'}"},
        "accounts": {},
        "providers": [
            {"name": "openai", "kind": "openai", "base_url": fakes["audio"].base_url, "api_key": "env:OIM_AUDIO_KEY"},
            {"name": "openai-images", "kind": "openai", "base_url": fakes["images"].base_url,
             "api_key": "env:OIM_IMAGES_KEY"},
            {"name": "sora", "kind": "openai", "base_url": fakes["sora"].base_url, "api_key": "env:OIM_SORA_KEY"},
        ],
        "models": [
            _model("tts-1", "speech", "openai", "tts-1", character="15"),
            _model("whisper-1", "transcription", "openai", "whisper-1", audio_second="0.0001"),
            _model("dall-e-3", "image", "openai-images", "dall-e-3", image="0.04"),
            _model("broken-images", "image", "openai-images", "error-500", image="0.04"),
            _model("sora-2", "video", "sora", "sora-2", video_second="0.10"),
        ],
        "jobs": {"tick_s": 0.05, "poll_initial_s": 0.05, "poll_max_s": 0.2, "lease_s": 5},
    }  # fmt: skip
    with GatewayServer(config) as gw:
        yield gw


def new_key(admin: Admin, scopes: list[str]) -> Any:
    """A key with these scopes and an account of its own with credit."""
    return admin.create_key(scopes=scopes, credits_micros=10**7)


def post(server: GatewayServer, path: str, key: str | None = None, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or server.master_key}", **kw.pop("headers", {})}
    return httpx.post(server.url + path, headers=headers, timeout=60, **kw)


def get(server: GatewayServer, path: str, key: str | None = None, **kw: Any) -> httpx.Response:
    return httpx.get(server.url + path, headers={"Authorization": f"Bearer {key or server.master_key}"}, **kw)


def ok(resp: httpx.Response, envelope: Any, status: int = 200) -> dict[str, Any]:
    """The success envelope's `data`, the whole body checked against its published type."""
    assert resp.status_code == status, resp.text
    body = resp.json()
    TypeAdapter(envelope).validate_python(body, strict=True)
    assert body["api_details"]["api_status"] == "success" and body["error"] == {}
    data: dict[str, Any] = body["data"]
    return data


def failed(resp: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    TypeAdapter(OneInferError).validate_python(body)
    assert body["api_details"]["api_status"] == "error" and body["data"] == {}
    assert body["error"]["status"] == status
    if code is not None:
        assert body["error"]["code"] == code, body
    error: dict[str, Any] = body["error"]
    return error


def png() -> bytes:
    """A real 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
        + chunk(b"IEND", b"")
    )


# ---- images ------------------------------------------------------------------------------------------------


def test_seed_001_image_example_answers_images_with_the_gateways_url(server: GatewayServer) -> None:
    data = ok(post(server, "/v1/ula/generate-image", json=SEED_001_IMAGE), omr.OneInferImageEnvelope)
    assert data["text"] == SEED_001_IMAGE["prompt"] and data["provider"] == "openai-images"
    assert data["model"] == "dall-e-3" and data["usage"]["images"] == 1
    [image] = data["images"]
    raw = base64.b64decode(image["base64_data"])
    assert image["mime_type"] == "image/png" and raw.startswith(b"\x89PNG")
    assert image["url"].startswith(server.url + "/v1/media/file-")  # the gateway's own URL, never the provider's
    download = httpx.get(image["url"])  # signed: no bearer
    assert download.status_code == 200 and download.content == raw


def test_negative_prompt_is_dropped_and_named_or_refused(server: GatewayServer) -> None:
    body = {**SEED_001_IMAGE, "negative_prompt": "blurry"}
    resp = post(server, "/v1/ula/generate-image", json=body)
    ok(resp, omr.OneInferImageEnvelope)
    assert resp.headers["x-inferplex-dropped-params"] == "negative_prompt"
    error = failed(post(server, "/v1/ula/generate-image", json={**body, "drop_params": False}), 400)
    assert error["param"] == "negative_prompt"


@pytest.mark.parametrize(
    "change,status,param",
    [
        ({"provider": "nope"}, 400, "provider"),  # unsupported provider
        ({"prompt": 123}, 422, "prompt"),  # the wrong JSON type: schema validation
        ({"n": "2"}, 422, "n"),
        ({"quality": "ultra"}, 400, "quality"),  # the right type, a value not allowed
        ({"model": "no-such-model"}, 400, "model"),  # an unknown model is OneInfer's 400
        ({"surprise": 1}, 400, "surprise"),
        ({"endpoint_id": ["x"]}, 422, "endpoint_id"),
        ({"endpoint_id": "nope"}, 400, "endpoint_id"),
        ({"tags": 5}, 422, "tags"),
        ({"provider": {"order": ["openai"]}}, 422, "provider"),
    ],
)
def test_image_errors_use_the_envelope_and_oneinfers_statuses(
    server: GatewayServer, change: dict[str, Any], status: int, param: str
) -> None:
    error = failed(post(server, "/v1/ula/generate-image", json={**SEED_001_IMAGE, **change}), status)
    assert error["param"] == param


def test_image_provider_failure_and_bad_bodies(server: GatewayServer) -> None:
    failed(post(server, "/v1/ula/generate-image", json={**SEED_001_IMAGE, "model": "broken-images"}), 502)
    failed(post(server, "/v1/ula/generate-image", json={}), 400)  # no prompt
    failed(post(server, "/v1/ula/generate-image", json=[1]), 422)
    failed(post(server, "/v1/ula/generate-image", content=b"x", headers={"content-type": "text/plain"}), 415)
    failed(httpx.post(server.url + "/v1/ula/generate-image", json=SEED_001_IMAGE), 401)


def test_a_key_without_the_images_scope_is_refused(server: GatewayServer, admin: Admin) -> None:
    key = new_key(admin, ["chat"])["key"]
    failed(post(server, "/v1/ula/generate-image", key, json=SEED_001_IMAGE), 403, "scope_not_allowed")


# ---- video -------------------------------------------------------------------------------------------------


def test_video_size_from_resolution_and_aspect_ratio() -> None:
    assert video_size("720P", "16:9") == "1280x720" and video_size("720p", "9:16") == "720x1280"
    assert video_size("1080P", "21:9") == "2520x1080" and video_size("480P", "1:1") == "480x480"
    assert video_size("480P", "16:9") == "854x480" and video_size("720P", "3:4") == "720x960"


def test_generate_video_blocks_until_the_job_completes(server: GatewayServer, fakes: dict[str, Any]) -> None:
    resp = post(server, "/v1/ula/generate-video", json=VIDEO)
    data = ok(resp, omr.OneInferVideoEnvelope)
    assert data["status"] == "completed" and data["progress"] == 100 and data["id"].startswith("video_")
    assert data["provider"] == "sora" and data["usage"] == {"seconds": 4, "size": "1280x720"}
    assert resp.headers["x-inferplex-dropped-params"] == "fps,generate_audio"
    sent = fakes["sora"].created[-1]["body"]
    assert sent == {"model": "sora-2", "prompt": VIDEO["prompt"], "seconds": "4", "size": "1280x720"}
    video = httpx.get(data["videos"][0]["url"])
    assert video.status_code == 200 and video.content == fakes["sora"].content_bytes(fakes["sora"].created[-1]["id"])
    same = get(server, f"/v1/videos/{data['id']}")  # the same durable job as OpenAI's /v1/videos
    assert same.status_code == 200 and same.json()["status"] == "completed"


def test_generate_video_answers_202_then_the_job_polls_to_completion(server: GatewayServer) -> None:
    data = ok(post(server, "/v1/ula/generate-video", json={**VIDEO, "wait_s": 0}), omr.OneInferVideoEnvelope, 202)
    assert data["status"] in ("queued", "in_progress") and data["videos"] == []
    deadline = time.monotonic() + 20
    while True:
        polled = ok(get(server, f"/v1/ula/generate-video/{data['id']}"), omr.OneInferVideoEnvelope)
        if polled["status"] == "completed" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert polled["status"] == "completed" and polled["videos"][0]["url"].startswith(server.url + "/v1/media/")
    failed(get(server, "/v1/ula/generate-video/video_nope"), 400, "video_not_found")  # 404: OneInfer's 400


def test_generate_video_multipart_with_a_reference_image(server: GatewayServer, fakes: dict[str, Any]) -> None:
    form = {"prompt": "The fox wakes up", "model": "sora-2", "provider": "sora", "duration": "4",
            "aspect_ratio": "9:16", "generate_audio": "false"}  # fmt: skip
    resp = post(server, "/v1/ula/generate-video", data=form, files={"files": ("fox.png", png(), "image/png")})
    assert ok(resp, omr.OneInferVideoEnvelope)["status"] == "completed"
    sent = fakes["sora"].created[-1]["body"]
    assert sent["size"] == "720x1280" and sent["input_reference"]["upload"] == "image/png"


def test_generate_video_failures(server: GatewayServer, admin: Admin) -> None:
    error = failed(post(server, "/v1/ula/generate-video", json={**VIDEO, "prompt": "FAIL please"}), 502)
    assert "moderation" in error["message"]  # the provider's own message
    failed(post(server, "/v1/ula/generate-video", json={**VIDEO, "resolution": "4K"}), 400)
    failed(post(server, "/v1/ula/generate-video", json={**VIDEO, "duration": "5"}), 422)
    failed(post(server, "/v1/ula/generate-video", json={**VIDEO, "duration": 30}), 400)
    failed(post(server, "/v1/ula/generate-video", json={**VIDEO, "duration": 5}), 400)  # Sora makes 4, 8 or 12 s
    failed(post(server, "/v1/ula/generate-video", json={**VIDEO, "drop_params": False}), 400)
    key = new_key(admin, ["images"])["key"]
    failed(post(server, "/v1/ula/generate-video", key, json=VIDEO), 403)


# ---- audio -------------------------------------------------------------------------------------------------

SPEECH = {"provider": "openai", "model": "tts-1", "prompt": "Hello from OneInfer.", "voice_id": "nova", "format": "mp3"}


def test_generate_audio_speech_answers_audios_in_the_envelope(server: GatewayServer) -> None:
    data = ok(post(server, "/v1/ula/generate-audio", json=SPEECH), omr.OneInferAudioEnvelope)
    [audio] = data["audios"]
    expected = fake_audio(SPEECH["prompt"], "mp3")
    assert base64.b64decode(audio["base64_data"]) == expected
    assert audio["url"] == "data:audio/mpeg;base64," + audio["base64_data"]
    assert audio["format"] == "mp3" and audio["mime_type"] == "audio/mpeg"
    assert data["text"] == SPEECH["prompt"] and data["usage"]["characters"] == len(SPEECH["prompt"])


def test_generate_audio_streams_the_bytes(server: GatewayServer) -> None:
    with httpx.stream("POST", server.url + "/v1/ula/generate-audio", json={**SPEECH, "stream": True, "format": "wav"},
                      headers=server.auth) as resp:  # fmt: skip
        assert resp.status_code == 200 and resp.headers["content-type"] == "audio/wav"
        assert b"".join(resp.iter_bytes()) == fake_audio(SPEECH["prompt"], "wav")


def test_generate_audio_defaults_and_dropped_fields(server: GatewayServer, fakes: dict[str, Any]) -> None:
    body = {k: v for k, v in SPEECH.items() if k not in ("voice_id", "model")}
    resp = post(server, "/v1/ula/generate-audio", json={**body, "volume": 0.5, "pitch": 1.0})
    ok(resp, omr.OneInferAudioEnvelope)
    assert resp.headers["x-inferplex-dropped-params"] == "pitch,volume"
    sent = fakes["audio"].last("/speech").body
    assert sent["model"] == "tts-1" and sent["voice"] in ("alloy", "nova", "ash", "coral")


@pytest.mark.parametrize(
    "change,status",
    [({"voice_id": "nobody"}, 400), ({"format": "ogg"}, 400), ({"speed": "fast"}, 422), ({"prompt": ""}, 400),
     ({"provider": "nope"}, 400), ({"model": "whisper-1"}, 400)],
)  # fmt: skip
def test_generate_audio_speech_errors(server: GatewayServer, change: dict[str, Any], status: int) -> None:
    failed(post(server, "/v1/ula/generate-audio", json={**SPEECH, **change}), status)


def test_generate_audio_multipart_transcribes(server: GatewayServer, fakes: dict[str, Any]) -> None:
    form = {"model": "whisper-1", "provider": "openai", "language": "en-IN"}
    files = {"file": ("speech.wav", wav_bytes(3.0, rate=16_000), "audio/wav")}
    data = ok(post(server, "/v1/ula/generate-audio", data=form, files=files), omr.OneInferAudioEnvelope)
    assert data["text"] == SAID and data["duration"] == pytest.approx(3.0, abs=0.01)
    assert fakes["audio"].last("/transcriptions").body["language"] == "en"
    failed(post(server, "/v1/ula/generate-audio", files={"model": (None, "whisper-1")}), 400)  # no file
    failed(post(server, "/v1/ula/generate-audio", data=form), 415)  # neither JSON nor multipart
    files = {"file": ("speech.wav", b"not audio at all", "audio/wav")}
    assert post(server, "/v1/ula/generate-audio", data=form, files=files).status_code in (400, 415)


def test_supported_voices(server: GatewayServer) -> None:
    resp = get(server, "/v1/ula/get-supported-voice-for-audio-models", params={"model_names": "tts-1,nope"})
    data = ok(resp, omr.OneInferVoicesEnvelope)
    assert data["unknown_models"] == ["nope"]
    tts = data["by_model"]["tts-1"]
    assert tts["provider"] == "openai" and "nova" in tts["voice_ids"] and tts["default_voice_id"] == tts["voice_ids"][0]
    every = ok(get(server, "/v1/ula/get-supported-voice-for-audio-models"), omr.OneInferVoicesEnvelope)
    assert list(every["by_model"]) == ["tts-1"] and every["unknown_models"] == []


# ---- seed 001's speech example on the chat route, and scopes ------------------------------------------------


def test_seed_001_speech_example_on_the_chat_route(server: GatewayServer, fakes: dict[str, Any]) -> None:
    data = ok(post(server, "/v1/ula/chat/completions", json=SEED_001_SPEECH), omr.OneInferAudioEnvelope)
    [audio] = data["audios"]
    assert base64.b64decode(audio["base64_data"]) == fake_audio(SEED_001_SPEECH["input"], "mp3")
    sent = fakes["audio"].last("/speech").body
    assert sent == {"model": "tts-1", "input": SEED_001_SPEECH["input"], "voice": "nova", "response_format": "mp3",
                    "speed": 1.0}  # fmt: skip
    failed(post(server, "/v1/ula/chat/completions", json={**SEED_001_SPEECH, "voice": "nobody"}), 400)
    failed(post(server, "/v1/ula/chat/completions", json={**SEED_001_SPEECH, "input": 5}), 422)


def test_speech_needs_the_tts_or_audio_scope(server: GatewayServer, admin: Admin) -> None:
    chat_only = new_key(admin, ["chat"])["key"]
    failed(post(server, "/v1/ula/chat/completions", chat_only, json=SEED_001_SPEECH), 403, "scope_not_allowed")
    failed(post(server, "/v1/ula/generate-audio", chat_only, json=SPEECH), 403, "scope_not_allowed")
    stt = new_key(admin, ["stt"])["key"]
    failed(post(server, "/v1/ula/generate-audio", stt, json=SPEECH), 403, "scope_not_allowed")
    failed(get(server, "/v1/ula/get-supported-voice-for-audio-models", stt), 403, "scope_not_allowed")
    tts = new_key(admin, ["tts"])["key"]
    ok(post(server, "/v1/ula/generate-audio", tts, json=SPEECH), omr.OneInferAudioEnvelope)
    audio = new_key(admin, ["audio"])["key"]
    ok(post(server, "/v1/ula/generate-audio", audio, json=SPEECH), omr.OneInferAudioEnvelope)


def test_a_token_without_tts_is_refused_speech(server: GatewayServer, admin: Admin) -> None:
    key = new_key(admin, ["chat", "tts", "stt"])["key"]
    token = post(server, "/v1/ula/oauth-authentication", params={"api_key": key}).json()["access_token"]
    ok(post(server, "/v1/ula/generate-audio", token, json=SPEECH), omr.OneInferAudioEnvelope)
    narrow = post(server, "/v1/auth/token", key, json={"scopes": ["stt"]}).json()["access_token"]
    failed(post(server, "/v1/ula/generate-audio", narrow, json=SPEECH), 403, "scope_not_allowed")
    files = {"file": ("speech.wav", wav_bytes(1.0, rate=16_000), "audio/wav")}
    ok(
        post(server, "/v1/ula/generate-audio", narrow, data={"model": "whisper-1"}, files=files),
        omr.OneInferAudioEnvelope,
    )


def test_the_models_list_names_the_media_models_kinds(server: GatewayServer) -> None:
    resp = get(server, "/v1/ula/models")
    ok(resp, OneInferModelsEnvelope)
    kinds = {m["model"]: m["kind"] for m in resp.json()["data"]}
    assert kinds["tts-1"] == "speech" and kinds["whisper-1"] == "transcription"
    assert kinds["dall-e-3"] == "image" and kinds["sora-2"] == "video"
