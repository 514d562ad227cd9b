"""Fakes of the three video job APIs (Veo's long-running operations, Bedrock's async invocation with its
results in a real S3 server, Replicate's predictions), and the adapters of each, built from a config."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import boto3
import pytest

from inferplex.config import DeploymentConfig, ModelConfig, ProviderConfig
from inferplex.families.videos import VideoRequest
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from inferplex.providers.registry import load_factory
from inferplex.targets import Target
from tests.fakes.bedrock_videos_upstream import FakeBedrockVideos
from tests.fakes.gemini_videos_upstream import FakeGeminiVideos
from tests.fakes.moto_server import moto_server
from tests.fakes.tasks_upstream import FakeReplicate

VEO_KEY = "gm-veo-fake"
REPLICATE_TOKEN = "r8_fake_token"
VEO = "veo-3.1-generate-preview"
REEL = "amazon.nova-reel-v1:1"
REPLICATE_MODEL = "google/veo-3"
_SETUP_CALLS = 3  # the unauthenticated calls that make the IAM user (create_user, create_access_key, put_user_policy)


@dataclass(frozen=True)
class S3Server:
    """moto's server with authentication on: every S3 call is checked (SigV4 recomputed from the secret) against
    an IAM user's access key, the deployment's AWS credentials. `bucket` is where Bedrock writes videos."""

    url: str
    key_id: str
    secret: str
    bucket: str

    def client(self, secret: str | None = None) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=self.key_id,
            aws_secret_access_key=secret or self.secret,
        )


def _iam_user(url: str) -> tuple[str, str]:
    iam = boto3.client(
        "iam", endpoint_url=url, region_name="us-east-1", aws_access_key_id="setup", aws_secret_access_key="setup"
    )
    iam.create_user(UserName="gateway")
    key = iam.create_access_key(UserName="gateway")["AccessKey"]
    policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
    iam.put_user_policy(UserName="gateway", PolicyName="s3", PolicyDocument=json.dumps(policy))
    return key["AccessKeyId"], key["SecretAccessKey"]


@pytest.fixture(scope="session")
def s3() -> Iterator[S3Server]:
    """moto's S3 server (`moto.server`, a process of its own) with IAM authentication enforced."""
    with moto_server({"INITIAL_NO_AUTH_ACTION_COUNT": str(_SETUP_CALLS)}) as url:
        key_id, secret = _iam_user(url)
        server = S3Server(url, key_id, secret, "reel-" + secrets.token_hex(6))
        server.client().create_bucket(Bucket=server.bucket)
        yield server


@pytest.fixture(scope="session")
def aws_env(s3: S3Server) -> Iterator[None]:
    """The deployment's credentials, as botocore's chain finds them: the IAM user's key."""
    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_ACCESS_KEY_ID", s3.key_id)
    mp.setenv("AWS_SECRET_ACCESS_KEY", s3.secret)
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
def fake_reel(s3: S3Server) -> Iterator[FakeBedrockVideos]:
    """Bedrock checks the same key's signatures, and writes the videos with it (as its service role would)."""
    fake = FakeBedrockVideos(s3.client(), s3.key_id, s3.secret, "us-east-1", steps=2).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_replicate() -> Iterator[FakeReplicate]:
    fake = FakeReplicate(REPLICATE_TOKEN, steps=3).start()
    yield fake
    fake.stop()


def providers(
    veo: FakeGeminiVideos, reel: FakeBedrockVideos, replicate: FakeReplicate, s3: S3Server
) -> list[dict[str, Any]]:
    """The three providers, as a gateway config's `providers:` section."""
    return [
        {"name": "veo", "kind": "gemini", "base_url": veo.url + "/v1beta", "api_key": "env:IPX_TEST_VEO_KEY"},
        {
            "name": "reel",
            "kind": "bedrock",
            "base_url": reel.url,
            "options": {"region": "us-east-1", "output_s3_uri": f"s3://{s3.bucket}/reel", "s3_endpoint_url": s3.url},
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
    s3: S3Server,
    aws_env: None,
) -> dict[str, ProviderConfig]:
    return {p["name"]: ProviderConfig.model_validate(p) for p in providers(fake_veo, fake_reel, fake_replicate, s3)}


class Built:
    """An adapter built by its kind's factory, with its target."""

    def __init__(self, adapter: Any, target: Target) -> None:
        self.adapter, self.target = adapter, target

    async def submit(self, idempotency_key: str | None = None, **body: Any) -> Any:
        request = GatewayRequest(VideoRequest.model_validate({"model": "clip", **body}))
        return await self.adapter.video_submit(request, self.target, CallInfo(idempotency_key=idempotency_key))

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
