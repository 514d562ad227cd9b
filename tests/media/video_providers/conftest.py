"""Fakes of the three video job APIs (Veo's long-running operations, Bedrock's async invocation with its
results in a real S3 server, Replicate's predictions), and the adapters of each, built from a config."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from inferplex.config import DeploymentConfig, ModelConfig, ProviderConfig
from inferplex.families.videos import VideoRequest
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from inferplex.providers.registry import load_factory
from inferplex.targets import Target
from tests.fakes.bedrock_videos_upstream import FakeBedrockVideos
from tests.fakes.gemini_videos_upstream import FakeGeminiVideos
from tests.fakes.tasks_upstream import FakeReplicate
from tests.media.storage.conftest import moto_url, s3_client  # noqa: F401  (moto's S3 server, shared)

VEO_KEY = "gm-veo-fake"
REPLICATE_TOKEN = "r8_fake_token"
AWS_KEY_ID, AWS_SECRET = "AKIDVIDEOFAKE", "video-fake-secret"
VEO = "veo-3.1-generate-preview"
REEL = "amazon.nova-reel-v1:1"
REPLICATE_MODEL = "google/veo-3"


@pytest.fixture(scope="session", autouse=True)
def _aws_env() -> Iterator[None]:
    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
    mp.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    mp.delenv("AWS_SESSION_TOKEN", raising=False)
    mp.delenv("AWS_PROFILE", raising=False)
    mp.setenv("IPX_TEST_VEO_KEY", VEO_KEY)
    mp.setenv("IPX_TEST_REPLICATE_TOKEN", REPLICATE_TOKEN)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def fake_veo() -> Iterator[FakeGeminiVideos]:
    fake = FakeGeminiVideos(VEO_KEY, steps=2).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def video_bucket(moto_url: str) -> str:  # noqa: F811
    name = "reel-" + secrets.token_hex(6)
    s3_client(moto_url).create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="session")
def fake_reel(moto_url: str, _aws_env: None) -> Iterator[FakeBedrockVideos]:  # noqa: F811
    fake = FakeBedrockVideos(s3_client(moto_url), AWS_KEY_ID, AWS_SECRET, "us-east-1", steps=2).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_replicate() -> Iterator[FakeReplicate]:
    fake = FakeReplicate(REPLICATE_TOKEN, steps=3).start()
    yield fake
    fake.stop()


def providers(
    veo: FakeGeminiVideos, reel: FakeBedrockVideos, replicate: FakeReplicate, moto: str, bucket: str
) -> list[dict[str, Any]]:
    """The three providers, as a gateway config's `providers:` section."""
    return [
        {"name": "veo", "kind": "gemini", "base_url": veo.url + "/v1beta", "api_key": "env:IPX_TEST_VEO_KEY"},
        {
            "name": "reel",
            "kind": "bedrock",
            "base_url": reel.url,
            "options": {"region": "us-east-1", "output_s3_uri": f"s3://{bucket}/reel", "s3_endpoint_url": moto},
        },
        {
            "name": "rep",
            "kind": "replicate",
            "base_url": replicate.url + "/v1",
            "api_key": "env:IPX_TEST_REPLICATE_TOKEN",
        },
    ]


@pytest.fixture(scope="session")
def provider_configs(
    fake_veo: FakeGeminiVideos,
    fake_reel: FakeBedrockVideos,
    fake_replicate: FakeReplicate,
    moto_url: str,  # noqa: F811
    video_bucket: str,
) -> dict[str, ProviderConfig]:
    return {
        p["name"]: ProviderConfig.model_validate(p)
        for p in providers(fake_veo, fake_reel, fake_replicate, moto_url, video_bucket)
    }


class Built:
    """An adapter built by its kind's factory, with its target."""

    def __init__(self, adapter: Any, target: Target) -> None:
        self.adapter, self.target = adapter, target

    async def submit(self, **body: Any) -> Any:
        request = GatewayRequest(VideoRequest.model_validate({"model": "clip", **body}))
        return await self.adapter.video_submit(request, self.target, CallInfo())

    async def status(self, job: Any) -> Any:
        return await self.adapter.video_status(job, self.target, CallInfo())

    async def content(self, job: Any, variant: str = "video") -> bytes:
        return b"".join([c async for c in self.adapter.video_content(job, variant, self.target, CallInfo())])

    async def cancel(self, job: Any) -> bool:
        result: bool = await self.adapter.video_cancel(job, self.target, CallInfo())
        return result


class Resources:
    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.http = session


@pytest.fixture
async def build(provider_configs: dict[str, ProviderConfig]) -> AsyncIterator[Any]:
    session = aiohttp.ClientSession()

    def make(provider: str, upstream: str, **changes: Any) -> Built:
        config = provider_configs[provider].model_copy(update=changes)
        adapter = load_factory(config.kind)(config, Resources(session))
        model = ModelConfig(
            name="clip", type="video", deployments=[DeploymentConfig(provider=provider, model=upstream)]
        )
        return Built(adapter, Target(model, model.deployments[0], config))

    yield make
    await session.close()
