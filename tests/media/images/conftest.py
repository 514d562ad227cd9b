"""A gateway deploying image models on each provider kind the image families serve, behind strict fakes:
OpenAI (dall-e-2, dall-e-3, gpt-image-1), Azure OpenAI (deployments), Imagen on the Gemini API, and Bedrock
(Titan, Nova Canvas, Stability). Priced so that each test can compute the exact charge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.fakes.bedrock_images_upstream import FakeBedrockImages
from tests.fakes.gemini_images_upstream import FakeImagen
from tests.fakes.openai_images_upstream import FakeOpenAIImages, FakeVendorImages
from tests.gateway_server import GatewayServer

OPENAI_KEY, AZURE_KEY, GEMINI_KEY = "sk-fake-images", "azure-fake-images", "gemini-fake-images"

# USD per image by size/quality (OpenAI's published dall-e prices), per million tokens for gpt-image.
DALL_E_2 = {"image_by": {"256x256": "0.016", "512x512": "0.018", "1024x1024": "0.02"}}
DALL_E_3 = {
    "image_by": {
        "1024x1024/standard": "0.04",
        "1024x1024/hd": "0.08",
        "1792x1024/standard": "0.08",
        "1792x1024/hd": "0.12",
        "1024x1792/standard": "0.08",
        "1024x1792/hd": "0.12",
    },
    "image": "0.04",
}
# The text output rate is deliberately far below the image output rate: image output tokens billed at the
# text rate would be visibly wrong.
GPT_IMAGE = {"input": "5", "output": "1", "image_input": "10", "image_output": "40"}


def _model(name: str, provider: str, upstream: str, pricing: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name,
        "type": "image",
        "deployments": [{"provider": provider, "model": upstream}],
        "pricing": pricing,
    }


@pytest.fixture(scope="package")
def fakes() -> Iterator[dict[str, Any]]:
    started = {
        "openai": FakeOpenAIImages(OPENAI_KEY).start(),
        "azure": FakeOpenAIImages(AZURE_KEY, azure=True).start(),
        "imagen": FakeImagen(GEMINI_KEY).start(),
        "bedrock": FakeBedrockImages().start(),
        "vendor": FakeVendorImages(OPENAI_KEY).start(),
    }
    yield started
    for fake in started.values():
        fake.stop()


def images_config(fakes: dict[str, Any], tmp: Path) -> dict[str, Any]:
    timeouts = {"connect": 2, "read": 10}
    return {
        "server": {"data_dir": str(tmp)},
        "storage": {"database_url": f"sqlite:///{tmp / 'inferplex.db'}"},
        "accounts": {},
        "providers": [
            {
                "name": "openai",
                "kind": "openai",
                "base_url": fakes["openai"].base_url,
                "api_key": "env:FAKE_IMAGES_OPENAI_KEY",
                "timeouts": timeouts,
            },
            {
                "name": "azure",
                "kind": "azure",
                "base_url": fakes["azure"].base_url,
                "api_key": "env:FAKE_IMAGES_AZURE_KEY",
                "options": {"api_version": "2025-04-01-preview"},
            },
            {
                "name": "gemini",
                "kind": "gemini",
                "base_url": fakes["imagen"].base_url,
                "api_key": "env:FAKE_IMAGES_GEMINI_KEY",
                "timeouts": timeouts,
            },
            {
                "name": "together",
                "kind": "openai",
                "profile": "together",
                "base_url": fakes["vendor"].url + "/v1",
                "api_key": "env:FAKE_IMAGES_OPENAI_KEY",
            },
            {
                "name": "fireworks",
                "kind": "openai",
                "profile": "fireworks",
                "base_url": fakes["vendor"].url + "/inference/v1",
                "api_key": "env:FAKE_IMAGES_OPENAI_KEY",
            },
            {
                "name": "bedrock",
                "kind": "bedrock",
                "base_url": fakes["bedrock"].url,
                "options": {"region": "us-east-1"},
                "timeouts": timeouts,
            },
        ],
        "models": [
            _model("dall-e-2", "openai", "dall-e-2", DALL_E_2),
            _model("dall-e-3", "openai", "dall-e-3", DALL_E_3),
            _model("gpt-image-1", "openai", "gpt-image-1", GPT_IMAGE),
            _model("broken-images", "openai", "error-500", {"image": "0.02"}),
            _model("azure-dall-e-3", "azure", "dall-e-3", DALL_E_3),
            _model("azure-gpt-image", "azure", "gpt-image-1", GPT_IMAGE),
            _model("imagen", "gemini", "imagen-4.0-generate-001", {"image": "0.04"}),
            _model(
                "gemini-image",
                "gemini",
                "gemini-2.5-flash-image",
                {"input": "0.3", "output": "2.5", "image_input": "0.3", "image_output": "30"},
            ),
            _model("flux-together", "together", "black-forest-labs/FLUX.1-schnell", {"image": "0.003"}),
            _model("flux-fireworks", "fireworks", "accounts/fireworks/models/flux-1-schnell-fp8", {"image": "0.0035"}),
            _model("imagen-broken", "gemini", "imagen-error-500", {"image": "0.04"}),
            _model(
                "titan",
                "bedrock",
                "amazon.titan-image-generator-v2:0",
                {"image_by": {"standard": "0.008", "hd": "0.01", "1024x1024/hd": "0.012"}},
            ),
            _model("nova-canvas", "bedrock", "amazon.nova-canvas-v1:0", {"image": "0.04"}),
            _model("sd35", "bedrock", "stability.sd3-5-large-v1:0", {"image": "0.08"}),
        ],
    }


@pytest.fixture(scope="package")
def gateway(fakes: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayServer]:
    mp = pytest.MonkeyPatch()
    mp.setenv("FAKE_IMAGES_OPENAI_KEY", OPENAI_KEY)
    mp.setenv("FAKE_IMAGES_AZURE_KEY", AZURE_KEY)
    mp.setenv("FAKE_IMAGES_GEMINI_KEY", GEMINI_KEY)
    mp.setenv("AWS_ACCESS_KEY_ID", "AKIDFAKE")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret")
    mp.delenv("AWS_SESSION_TOKEN", raising=False)
    mp.delenv("AWS_PROFILE", raising=False)
    with GatewayServer(images_config(fakes, tmp_path_factory.mktemp("images"))) as gw:
        yield gw
    mp.undo()


@pytest.fixture
def client(gateway: GatewayServer) -> Iterator[openai.OpenAI]:
    c = openai.OpenAI(base_url=gateway.base_url, api_key=gateway.master_key, max_retries=0, timeout=30)
    yield c
    c.close()


class Admin:
    def __init__(self, gateway: GatewayServer) -> None:
        self.http = httpx.Client(base_url=gateway.url, headers=gateway.auth, timeout=30)

    def key(self, credits_micros: int) -> dict[str, Any]:
        r = self.http.post("/admin/keys", json={"name": "images", "credits_micros": credits_micros})
        assert r.status_code == 201, r.text
        return dict(r.json())

    def balance(self, account_id: str) -> int:
        r = self.http.get(f"/admin/accounts/{account_id}")
        assert r.status_code == 200, r.text
        return int(r.json()["balance_micros"])

    def ledger(self, account_id: str) -> list[dict[str, Any]]:
        r = self.http.get(f"/admin/accounts/{account_id}/ledger")
        assert r.status_code == 200, r.text
        return list(r.json()["data"])


@pytest.fixture
def admin(gateway: GatewayServer) -> Iterator[Admin]:
    a = Admin(gateway)
    yield a
    a.http.close()
