"""The audio families through the ledger with keyed accounts: speech per character or by audio tokens,
transcription per second (never zero) or by tokens, failures free, concurrency exact, and the audio limit
rules (`characters_synthesised`, `audio_duration_seconds`)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.accounts.conftest import Admin
from tests.gateway_server import GatewayServer
from tests.media.audio.conftest import keyed

# The SDK marks `audio.translations` deprecated; the route is still OpenAI's (and Groq's, and Azure's).
TRANSLATIONS = pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")
TEXT = "Twenty characters!!!"  # 20 characters, 2 words


def balance(admin: Admin, account_id: str) -> int:
    """The account's balance, checked against the sum of its ledger."""
    value: int = admin.account(account_id)["balance_micros"]
    assert value == sum(e["amount_micros"] for e in admin.ledger(account_id))
    return value


def test_speech_is_billed_per_character_exactly(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=10_000)
    audio = keyed(server, created["key"]).audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=TEXT
    )
    assert audio.headers["x-inferplex-cost-micros"] == str(20 * 15)
    assert balance(admin, created["account_id"]) == 10_000 - 300


def test_token_priced_speech_is_billed_from_the_providers_usage(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=10_000)
    r = keyed(server, created["key"]).audio.speech.with_raw_response.create(
        model="gpt-4o-mini-tts", voice="coral", input=TEXT
    )
    # the fake's usage: 2 text tokens in at 0.6, 50 audio tokens out at 12 micro-USD each
    expected = math.ceil(2 * 0.6 + 50 * 12)
    assert r.headers["x-inferplex-cost-micros"] == str(expected) and r.content
    assert balance(admin, created["account_id"]) == 10_000 - expected


def test_gemini_speech_is_billed_from_its_usage_metadata(server: GatewayServer, admin: Admin) -> None:
    created = admin.create_key(credits_micros=10_000)
    r = keyed(server, created["key"]).audio.speech.with_raw_response.create(
        model="gemini-tts", voice="Kore", input=TEXT, response_format="wav"
    )
    assert r.headers["x-inferplex-cost-micros"] == str(math.ceil(2 * 0.5 + 50 * 10))


def test_whisper_is_billed_per_second(server: GatewayServer, admin: Admin, wav_file: Path) -> None:
    created = admin.create_key(credits_micros=10_000)
    r = keyed(server, created["key"]).audio.transcriptions.with_raw_response.create(model="whisper-1", file=wav_file)
    assert r.headers["x-inferplex-cost-micros"] == "300"  # 3 s at 100 micro-USD a second
    assert balance(admin, created["account_id"]) == 10_000 - 300


def test_per_second_audio_is_never_billed_zero(server: GatewayServer, admin: Admin, wav_file: Path) -> None:
    """`whisper-bare` answers only its text (no usage, no duration): the gateway's own measure of the file
    (3 s) is billed, whatever the format asked."""
    created = admin.create_key(credits_micros=10_000)
    for fmt in ("json", "text", "verbose_json"):
        r = keyed(server, created["key"]).audio.transcriptions.with_raw_response.create(
            model="whisper-bare", file=wav_file, response_format=fmt
        )
        assert r.status_code == 200 and r.headers["x-inferplex-cost-micros"] == "300"
    assert balance(admin, created["account_id"]) == 10_000 - 900


def test_groq_bills_short_audio_as_ten_seconds(server: GatewayServer, admin: Admin, wav_file: Path) -> None:
    """Groq's json says neither usage nor duration: the gateway asks for verbose_json, and bills 3 s of audio
    as Groq does, as 10 s."""
    created = admin.create_key(credits_micros=10_000)
    r = keyed(server, created["key"]).audio.transcriptions.with_raw_response.create(model="groq-whisper", file=wav_file)
    assert r.headers["x-inferplex-cost-micros"] == "1000"
    assert r.parse().usage.seconds == 10  # type: ignore[union-attr]


def test_token_priced_transcription(server: GatewayServer, admin: Admin, wav_file: Path) -> None:
    created = admin.create_key(credits_micros=10_000)
    r = keyed(server, created["key"]).audio.transcriptions.with_raw_response.create(
        model="gpt-4o-transcribe", file=wav_file
    )
    # 30 audio tokens (3 s) at 6, no text tokens in, 11 tokens out (the fake's: 9 words + 2) at 10
    assert r.headers["x-inferplex-cost-micros"] == str(30 * 6 + 11 * 10)
    assert r.parse().text and balance(admin, created["account_id"]) == 10_000 - 290


def test_failed_calls_cost_nothing(server: GatewayServer, admin: Admin, wav_file: Path) -> None:
    created = admin.create_key(credits_micros=10_000)
    client = keyed(server, created["key"])
    with pytest.raises(openai.APIStatusError):
        client.audio.transcriptions.create(model="whisper-broken", file=wav_file)
    with pytest.raises(openai.APIStatusError):
        client.audio.speech.create(model="tts-broken", voice="alloy", input=TEXT)
    with pytest.raises(openai.BadRequestError):
        client.audio.speech.create(model="tts-1", voice="nobody", input=TEXT)
    assert balance(admin, created["account_id"]) == 10_000
    kinds = [e["kind"] for e in admin.ledger(created["account_id"])]
    assert kinds.count("reserve") == kinds.count("settle") + kinds.count("release") or "reserve" not in kinds


def test_the_worst_case_is_reserved_before_the_call(server: GatewayServer, admin: Admin, wav_file: Path) -> None:
    poor = admin.create_key(credits_micros=299)  # 3 s of whisper-1 costs 300
    with pytest.raises(openai.PermissionDeniedError) as caught:
        keyed(server, poor["key"]).audio.transcriptions.create(model="whisper-1", file=wav_file)
    assert "insufficient_credits" in str(caught.value.body)
    with pytest.raises(openai.PermissionDeniedError):
        keyed(server, poor["key"]).audio.speech.create(model="tts-1", voice="alloy", input=TEXT)  # 300


def test_concurrent_requests_reconcile_exactly(server: GatewayServer, admin: Admin, wav_file: Path) -> None:
    created = admin.create_key(credits_micros=300 * 10)  # ten speeches, or ten transcriptions
    headers = {"Authorization": f"Bearer {created['key']}"}
    data = wav_file.read_bytes()

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=60) as http:
            speech = [http.post("/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": TEXT})
                      for _ in range(12)]  # fmt: skip
            stt = [http.post("/audio/transcriptions", data={"model": "whisper-1"},
                             files={"file": ("a.wav", data, "audio/wav")}) for _ in range(12)]  # fmt: skip
            return await asyncio.gather(*speech, *stt)

    responses = asyncio.run(burst())
    ok = [r for r in responses if r.status_code == 200]
    assert len(ok) == 10 and all(r.status_code == 403 for r in responses if r.status_code != 200)
    assert balance(admin, created["account_id"]) == 0


# ---- the audio limit rules ----------------------------------------------------------------------------------


def _rule(metric: str, limit: int) -> dict[str, Any]:
    return {"metric": metric, "period": "minute", "max": limit}


def test_characters_synthesised_limits_speech_only(server: GatewayServer, admin: Admin, wav_file: Path) -> None:
    created = admin.create_key(credits_micros=100_000, limit_rules=[_rule("characters_synthesised", 30)])
    client = keyed(server, created["key"])
    client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)  # 20 of 30
    with pytest.raises(openai.RateLimitError) as caught:
        client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)  # 40 > 30
    assert "characters synthesised" in str(caught.value.body)
    assert caught.value.response.headers["retry-after"]
    client.audio.speech.create(model="tts-1", voice="alloy", input="0123456789")  # exactly 30
    assert client.audio.transcriptions.create(model="whisper-1", file=wav_file).text  # not counted


@TRANSLATIONS
def test_audio_duration_seconds_limits_transcription(server: GatewayServer, admin: Admin, wav_file: Path) -> None:
    created = admin.create_key(credits_micros=100_000, limit_rules=[_rule("audio_duration_seconds", 5)])
    client = keyed(server, created["key"])
    client.audio.transcriptions.create(model="whisper-1", file=wav_file)  # 3 s of 5
    with pytest.raises(openai.RateLimitError):
        client.audio.translations.create(model="whisper-1", file=wav_file)  # 6 s > 5
    client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)  # speech counts no seconds
    per_request = admin.create_key(
        credits_micros=100_000, limit_rules=[{**_rule("audio_duration_seconds", 2), "per_request": True}]
    )
    with pytest.raises(openai.RateLimitError) as caught:
        keyed(server, per_request["key"]).audio.transcriptions.create(model="whisper-1", file=wav_file)
    assert "3 audio duration seconds" in str(caught.value.body)


def test_an_mp3_upload_is_measured_from_its_frames(server: GatewayServer, admin: Admin, tmp_path: Path) -> None:
    """No usage, no duration from the provider, and not a WAV: the gateway reads the MP3's frames."""
    from inferplex.families.transcription import measure_ms
    from tests.media.audio.test_audio_units import mp3_frames

    path = tmp_path / "talk.mp3"
    path.write_bytes(mp3_frames(200))
    ms = measure_ms(str(path))
    assert ms is not None and 5000 <= ms <= 5300
    created = admin.create_key(credits_micros=10_000)
    r = keyed(server, created["key"]).audio.transcriptions.with_raw_response.create(model="whisper-bare", file=path)
    assert r.headers["x-inferplex-cost-micros"] == str(math.ceil(ms / 10))  # 100 micro-USD a second
