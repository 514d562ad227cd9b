"""The audio limit rules hold across replicas: two `inferplex serve` processes sharing PostgreSQL and Redis
admit exactly what a key's `characters_synthesised` and `audio_duration_seconds` rules allow, together."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.accounts.conftest import REDIS_URL, Admin, own_database
from tests.media.audio.conftest import audio_config
from tests.replicas import serve

MASTER = "ipx-audio-replica-master"
TEXT = "Twenty characters!!!"


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    with own_database() as url:
        yield url


@pytest.fixture(scope="module")
def replicas(fakes: dict[str, Any], pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    tmp = tmp_path_factory.mktemp("audio-replicas")
    prefix = f"inferplex_test:{os.urandom(6).hex()}:"
    config = audio_config(fakes, tmp)
    config["storage"] = {"database_url": pg_url, "redis_url": REDIS_URL, "redis_prefix": prefix}
    config["server"]["master_key"] = "env:INFERPLEX_TEST_MASTER"
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    with serve([path, path], {**os.environ, "INFERPLEX_TEST_MASTER": MASTER}, prefix) as urls:
        yield urls


def _rule(metric: str, limit: int) -> dict[str, Any]:
    return {"metric": metric, "period": "minute", "max": limit}


def test_characters_synthesised_is_one_window_across_replicas(replicas: list[str]) -> None:
    admin = Admin(replicas[0], MASTER)
    key = admin.create_key(credits_micros=10**6, limit_rules=[_rule("characters_synthesised", 100)])["key"]
    admin.close()

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {key}"}) as client:
            body = {"model": "tts-1", "voice": "alloy", "input": TEXT}
            calls = [client.post(replicas[i % 2] + "/v1/audio/speech", json=body) for i in range(12)]
            return [r.status_code for r in await asyncio.gather(*calls)]

    statuses = asyncio.run(burst())
    assert statuses.count(200) == 5 and statuses.count(429) == 7  # 5 x 20 characters fill 100


def test_audio_duration_seconds_is_one_window_across_replicas(replicas: list[str], wav_file: Path) -> None:
    admin = Admin(replicas[1], MASTER)
    key = admin.create_key(credits_micros=10**6, limit_rules=[_rule("audio_duration_seconds", 10)])["key"]
    admin.close()
    data = wav_file.read_bytes()  # 3 s

    async def burst() -> list[int]:
        async with httpx.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {key}"}) as client:
            calls = [
                client.post(replicas[i % 2] + "/v1/audio/transcriptions", data={"model": "whisper-1"},
                            files={"file": ("a.wav", data, "audio/wav")})
                for i in range(6)
            ]  # fmt: skip
            return [r.status_code for r in await asyncio.gather(*calls)]

    statuses = asyncio.run(burst())
    assert statuses.count(200) == 3 and statuses.count(429) == 3  # 3 x 3 s of 10
