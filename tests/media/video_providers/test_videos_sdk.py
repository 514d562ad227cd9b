"""Veo, Nova Reel and Replicate behind `/v1/videos`, through the official `openai` SDK: `create_and_poll`,
then `download_content`; a job that fails upstream is failed with the provider's message; what a provider
cannot make is a 400 naming the field; a job deleted while it runs is cancelled upstream where the provider
can; each completed job is billed for its seconds."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.accounts.conftest import Admin
from tests.fakes import bedrock_videos_upstream as reel_fake
from tests.fakes import gemini_videos_upstream as veo_fake
from tests.fakes import tasks_upstream as rep_fake
from tests.fakes.bedrock_videos_upstream import FakeBedrockVideos
from tests.fakes.gemini_videos_upstream import FakeGeminiVideos, mp4
from tests.fakes.tasks_upstream import FakeReplicate
from tests.gateway_server import GatewayServer
from tests.media.video_providers.conftest import REEL, REPLICATE_MODEL, VEO, S3Server, providers
from tests.media.videos.conftest import balance, new_key, wait_for

pytestmark = pytest.mark.filterwarnings("ignore:The Sora API:DeprecationWarning")

MASTER = "ipx-video-providers-master"
PRICE = "0.25"  # USD per second, every model here
MICROS_PER_SECOND = 250_000


def model(name: str, provider: str, upstream: str) -> dict[str, Any]:
    pricing = {"input": "0", "video_second": PRICE}
    return {
        "name": name,
        "type": "video",
        "deployments": [{"provider": provider, "model": upstream}],
        "pricing": pricing,
    }


@pytest.fixture(scope="module")
def server(
    fake_veo: FakeGeminiVideos,
    fake_reel: FakeBedrockVideos,
    fake_replicate: FakeReplicate,
    s3: S3Server,
    aws_env: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayServer]:
    data: Path = tmp_path_factory.mktemp("video-providers")
    config = {
        "server": {"data_dir": str(data)},
        "providers": providers(fake_veo, fake_reel, fake_replicate, s3),
        "models": [
            model("veo-clip", "veo", VEO),
            model("reel-clip", "reel", REEL),
            model("rep-clip", "rep", REPLICATE_MODEL),
        ],
        "storage": {"database_url": f"sqlite:///{data / 'inferplex.db'}"},
        "jobs": {"tick_s": 0.05, "poll_initial_s": 0.05, "poll_max_s": 0.2, "lease_s": 5, "max_concurrent_per_key": 50},
    }
    with GatewayServer(config, MASTER) as s:
        yield s


@pytest.fixture(scope="module")
def admin(server: GatewayServer) -> Iterator[Admin]:
    a = Admin(server.url, MASTER)
    yield a
    a.close()


def client(server: GatewayServer, key: str = MASTER) -> openai.OpenAI:
    return openai.OpenAI(api_key=key, base_url=server.base_url, max_retries=0, timeout=30)


# model, the request's seconds and size (each one its provider makes)
CASES = [
    ("veo-clip", "8", "1280x720"),
    ("reel-clip", "6", "1280x720"),
    ("rep-clip", "4", "720x1280"),
]


@pytest.mark.parametrize("name,seconds,size", CASES)
def test_create_and_poll_then_download(server: GatewayServer, admin: Admin, name: str, seconds: str, size: str) -> None:
    key, account = new_key(admin)
    c = client(server, key)
    prompt = f"a heron over a lake, by {name}"
    video = c.videos.create_and_poll(
        model=name,
        prompt=prompt,
        seconds=seconds,  # type: ignore[arg-type]  # Veo's, Nova Reel's and Replicate's durations, not only Sora's
        size=size,  # type: ignore[arg-type]
        poll_interval_ms=50,
    )
    assert video.status == "completed" and video.progress == 100 and video.error is None, video
    assert video.model == name and video.seconds == seconds and video.size == size
    assert c.videos.download_content(video.id, variant="video").content == mp4(prompt)
    with pytest.raises(openai.NotFoundError):
        c.videos.download_content(video.id, variant="thumbnail")
    wait_for(lambda: balance(admin, account) == 50_000_000 - int(seconds) * MICROS_PER_SECOND)


@pytest.mark.parametrize(
    "name,seconds,size,message",
    [
        ("veo-clip", "4", "720x1280", veo_fake.FAILURE),
        ("reel-clip", "6", "1280x720", reel_fake.FAILURE),
        ("rep-clip", "4", "720x1280", rep_fake.FAILURE),
    ],
)
def test_a_job_that_fails_upstream_fails_with_the_providers_message(
    server: GatewayServer, admin: Admin, name: str, seconds: str, size: str, message: str
) -> None:
    key, account = new_key(admin)
    c = client(server, key)
    video = c.videos.create_and_poll(
        model=name,
        prompt="FAIL this one",
        seconds=seconds,  # type: ignore[arg-type]
        size=size,  # type: ignore[arg-type]
        poll_interval_ms=50,
    )
    assert video.status == "failed" and video.error is not None and video.error.message == message
    wait_for(lambda: balance(admin, account) == 50_000_000)  # a failed job costs nothing


@pytest.mark.parametrize(
    "name,body,param",
    [
        ("veo-clip", {"size": "1792x1024"}, "size"),
        ("veo-clip", {"seconds": "12"}, "seconds"),
        ("reel-clip", {"seconds": "4", "size": "1280x720"}, "seconds"),
        ("reel-clip", {"seconds": "6", "size": "720x1280"}, "size"),
        ("rep-clip", {"size": "1024x1792"}, "size"),
    ],
)
def test_what_a_provider_cannot_make_is_a_400_naming_the_field(
    server: GatewayServer, name: str, body: dict[str, Any], param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client(server).videos.create(model=name, prompt="a heron", **body)
    assert err.value.status_code == 400 and err.value.param == param


def test_a_providers_own_refusal_keeps_its_words(server: GatewayServer) -> None:
    with pytest.raises(openai.APIStatusError) as err:
        client(server).videos.create(model="rep-clip", prompt="a heron", seconds="5")  # type: ignore[arg-type]
    assert err.value.status_code == 422
    assert "input.duration: duration must be one of the following: 4, 6, 8" in str(err.value.message)


def test_deleting_a_running_replicate_job_cancels_the_prediction(
    server: GatewayServer, fake_replicate: FakeReplicate
) -> None:
    c = client(server)
    video = c.videos.create(model="rep-clip", prompt="SLOW heron")
    wait_for(lambda: c.videos.retrieve(video.id).status == "in_progress")
    prediction = next(p for p in fake_replicate.predictions.values() if p["input"]["prompt"] == "SLOW heron")
    assert c.videos.delete(video.id).deleted
    wait_for(lambda: prediction["status"] == "canceled")
    assert fake_replicate.last("/cancel").path == f"/v1/predictions/{prediction['id']}/cancel"


def test_an_uploaded_reference_image_reaches_each_provider(
    server: GatewayServer,
    fake_veo: FakeGeminiVideos,
    fake_reel: FakeBedrockVideos,
    fake_replicate: FakeReplicate,
    tmp_path: Path,
) -> None:
    from tests.media.video_providers.test_adapters import PNG

    image = tmp_path / "first.png"
    image.write_bytes(PNG)
    encoded = base64.b64encode(PNG).decode()
    c = client(server)
    for name, seconds, size in CASES:
        with image.open("rb") as f:
            video = c.videos.create(
                model=name,
                prompt=f"animate this for {name}",
                seconds=seconds,  # type: ignore[arg-type]
                size=size,  # type: ignore[arg-type]
                input_reference=f,
            )
        assert video.status in ("queued", "in_progress")
    veo_body = fake_veo.last(":predictLongRunning").body
    assert veo_body["instances"][0]["image"] == {"bytesBase64Encoded": encoded, "mimeType": "image/png"}
    reel_body = fake_reel.last("/async-invoke").body
    assert reel_body["modelInput"]["textToVideoParams"]["images"] == [{"format": "png", "source": {"bytes": encoded}}]
    rep_body = fake_replicate.last("/predictions").body
    assert rep_body["input"]["image"] == "data:image/png;base64," + encoded


@pytest.mark.parametrize("name,seconds,size", CASES[:2])
def test_deleting_a_running_job_where_the_provider_has_no_cancel(
    server: GatewayServer, name: str, seconds: str, size: str
) -> None:
    """Veo and Nova Reel cannot cancel: the job is deleted at the gateway all the same (and costs nothing)."""
    c = client(server)
    video = c.videos.create(model=name, prompt=f"SLOW {name}", seconds=seconds, size=size)  # type: ignore[arg-type]
    wait_for(lambda: c.videos.retrieve(video.id).status == "in_progress")
    assert c.videos.delete(video.id).deleted
    with pytest.raises(openai.NotFoundError):
        c.videos.retrieve(video.id)
