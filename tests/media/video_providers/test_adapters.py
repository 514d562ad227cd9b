"""The three video adapters against their strict fakes: a job submitted, polled through its states, its video
streamed back; a job that fails upstream failed with the provider's own message; cancel where the provider
has one; and what each provider refuses refused in its own words."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from inferplex.errors import GatewayError, InvalidRequest, NotFound, Unavailable, UpstreamError
from inferplex.families.videos import JobStatus, ReferenceFile, VideoAdapter, VideoRequest
from inferplex.gateway_request import GatewayRequest
from inferplex.providers.base import CallInfo
from tests.fakes import bedrock_videos_upstream as reel_fake
from tests.fakes import gemini_videos_upstream as veo_fake
from tests.fakes import tasks_upstream as rep_fake
from tests.fakes.bedrock_videos_upstream import FakeBedrockVideos
from tests.fakes.gemini_videos_upstream import FakeGeminiVideos, mp4
from tests.fakes.tasks_upstream import FakeReplicate
from tests.media.video_providers.conftest import REEL, REPLICATE_MODEL, VEO, S3Server

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def header(recorded: Any, name: str) -> str | None:
    """A recorded request's header, by its name in any case."""
    return {k.lower(): v for k, v in recorded.headers.items()}.get(name.lower())


async def poll_until_done(built: Any, job: Any) -> list[JobStatus]:
    seen = []
    for _ in range(10):
        status = await built.status(job)
        seen.append(status)
        if status.status in ("completed", "failed"):
            return seen
    raise AssertionError(f"never finished: {seen}")


# --- Veo (Gemini API long-running operations) ---


async def test_veo_job_from_submit_to_video(build: Any, fake_veo: FakeGeminiVideos) -> None:
    veo = build("veo", VEO)
    assert isinstance(veo.adapter, VideoAdapter)
    job = await veo.submit(prompt="a red fox in the snow", seconds="8", size="1280x720")
    assert job.upstream_id.startswith(f"models/{VEO}/operations/")
    sent = fake_veo.last(":predictLongRunning")
    assert header(sent, "x-goog-api-key") == "gm-veo-fake"
    assert sent.body["parameters"] == {"aspectRatio": "16:9", "durationSeconds": 8, "resolution": "720p"}
    seen = await poll_until_done(veo, job)
    assert seen == [JobStatus("in_progress", 0), JobStatus("completed", 100, seconds=8, size="1280x720")]
    assert fake_veo.polls[job.upstream_id] == 2
    assert await veo.content(job) == mp4("a red fox in the snow")
    download = fake_veo.last(":download")
    assert header(download, "x-goog-api-key") == "gm-veo-fake" and download.query == {"alt": "media"}
    blob = fake_veo.last(job.upstream_id.rsplit("/", 1)[1].lower())
    assert blob.path.startswith("/blobs/") and header(blob, "x-goog-api-key") is None  # the key stays at Google's API


@pytest.mark.parametrize("prompt,message", [("FAIL please", veo_fake.FAILURE), ("UNSAFE please", veo_fake.FILTERED)])
async def test_veo_job_that_fails_upstream_fails_with_its_message(
    build: Any, fake_veo: FakeGeminiVideos, prompt: str, message: str
) -> None:
    veo = build("veo", VEO)
    job = await veo.submit(prompt=prompt, seconds="4")
    assert (await poll_until_done(veo, job))[-1] == JobStatus("failed", 0, error=message)
    with pytest.raises(NotFound):
        await veo.content(job)


async def test_veo_cannot_cancel_and_asks_nothing(build: Any, fake_veo: FakeGeminiVideos) -> None:
    veo = build("veo", VEO)
    job = await veo.submit(prompt="a fox")
    before = len(fake_veo.requests)
    assert await veo.cancel(job) is False
    assert len(fake_veo.requests) == before


async def test_veo_offers_no_thumbnail(build: Any) -> None:
    veo = build("veo", VEO)
    job = await veo.submit(prompt="a fox")
    with pytest.raises(NotFound):
        await veo.content(job, "thumbnail")


@pytest.mark.parametrize(
    "model,body,status,message",
    [
        (
            "veo-2.0-generate-001",
            {"seconds": "4"},
            400,
            "The number value for `durationSeconds` is out of bound. Please provide a value between 5 and 8, "
            "inclusive.",
        ),
        (VEO, {"seconds": "6", "size": "1920x1080"}, 400, "1080p resolution is only supported for 8 second videos."),
        ("veo-9", {}, 404, "models/veo-9 is not found for API version v1beta"),
    ],
)
async def test_veo_refusals_are_the_providers_own(
    build: Any, model: str, body: dict[str, Any], status: int, message: str
) -> None:
    veo = build("veo", model)
    with pytest.raises(InvalidRequest) as err:
        await veo.submit(prompt="a fox", **body)
    assert err.value.status == status and message in err.value.message


async def test_veo_with_a_wrong_key_is_refused_upstream(build: Any) -> None:
    from pydantic import SecretStr

    veo = build("veo", VEO, api_key=SecretStr("gm-wrong"))
    with pytest.raises(GatewayError, match="API key not valid"):
        await veo.submit(prompt="a fox")


async def test_veo_sends_an_uploaded_reference_image(build: Any, fake_veo: FakeGeminiVideos, tmp_path: Path) -> None:
    path = tmp_path / "ref.png"
    path.write_bytes(PNG)
    body = VideoRequest.model_validate({"model": "clip", "prompt": "animate this"})
    body = body.with_reference(ReferenceFile(str(path), "ref.png", "image/png", len(PNG)))
    veo = build("veo", VEO)
    job = await veo.adapter.video_submit(GatewayRequest(body), veo.target, CallInfo())
    sent = fake_veo.last(":predictLongRunning").body["instances"][0]
    assert sent["image"] == {"bytesBase64Encoded": base64.b64encode(PNG).decode(), "mimeType": "image/png"}
    assert (await poll_until_done(veo, job))[-1].status == "completed"


async def test_veo_sends_a_data_url_reference(build: Any, fake_veo: FakeGeminiVideos) -> None:
    veo = build("veo", VEO)
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    await veo.submit(prompt="animate this", input_reference={"image_url": url})
    assert fake_veo.last(":predictLongRunning").body["instances"][0]["image"]["mimeType"] == "image/png"
    with pytest.raises(InvalidRequest) as err:
        await veo.submit(prompt="x", input_reference={"image_url": "https://example.com/a.png"})
    assert err.value.param == "input_reference"
    for bad in ({"file_id": "file-abc"}, {"image_url": "data:image/png;base64,%%%"}):
        with pytest.raises(InvalidRequest) as err:
            await veo.submit(prompt="x", input_reference=bad)
        assert err.value.param == "input_reference"


# --- Nova Reel (Bedrock async invocation, results in S3) ---


async def test_reel_job_from_submit_to_video_in_s3(build: Any, fake_reel: FakeBedrockVideos, s3: S3Server) -> None:
    reel = build("reel", REEL)
    job = await reel.submit(prompt="waves on a beach", seconds="6", size="1280x720")
    assert job.upstream_id.startswith("arn:aws:bedrock:us-east-1:123456789012:async-invoke/")
    sent = fake_reel.last("/async-invoke")
    assert (header(sent, "Authorization") or "").startswith(f"AWS4-HMAC-SHA256 Credential={s3.key_id}/")
    assert sent.body["outputDataConfig"] == {"s3OutputDataConfig": {"s3Uri": f"s3://{s3.bucket}/reel"}}
    assert sent.body["modelInput"]["taskType"] == "TEXT_VIDEO"
    seen = await poll_until_done(reel, job)
    assert seen == [JobStatus("in_progress", 0), JobStatus("completed", 100, seconds=6, size="1280x720")]
    invocation = job.upstream_id.rsplit("/", 1)[1]
    stored = s3.client().get_object(Bucket=s3.bucket, Key=f"reel/{invocation}/output.mp4")["Body"].read()
    assert stored == mp4("waves on a beach")
    assert await reel.content(job) == stored


async def test_reel_multi_shot_twelve_seconds(build: Any, fake_reel: FakeBedrockVideos) -> None:
    reel = build("reel", REEL)
    job = await reel.submit(prompt="a city at night", seconds="12", size="1280x720")
    assert fake_reel.last("/async-invoke").body["modelInput"]["videoGenerationConfig"]["durationSeconds"] == 12
    assert (await poll_until_done(reel, job))[-1] == JobStatus("completed", 100, seconds=12, size="1280x720")


async def test_a_reel_submit_retried_with_its_key_finds_the_first_job(build: Any, fake_reel: FakeBedrockVideos) -> None:
    """The router may retry a submit whose answer was lost: with the request's idempotency key as Bedrock's
    clientRequestToken, the retry gets the first invocation back instead of starting (and billing) another."""
    reel = build("reel", REEL)
    first = await reel.submit("job-key-1", prompt="a lighthouse", seconds="6", size="1280x720")
    again = await reel.submit("job-key-1", prompt="a lighthouse", seconds="6", size="1280x720")
    other = await reel.submit("job-key-2", prompt="a lighthouse", seconds="6", size="1280x720")
    assert again.upstream_id == first.upstream_id != other.upstream_id
    assert fake_reel.last("/async-invoke").body["clientRequestToken"] == "job-key-2"


async def test_reel_job_that_fails_upstream_fails_with_its_message(build: Any) -> None:
    reel = build("reel", REEL)
    job = await reel.submit(prompt="FAIL now", seconds="6", size="1280x720")
    assert (await poll_until_done(reel, job))[-1] == JobStatus("failed", 0, error=reel_fake.FAILURE)
    with pytest.raises(NotFound):
        await reel.content(job)


async def test_reel_cannot_cancel(build: Any) -> None:
    reel = build("reel", REEL)
    job = await reel.submit(prompt="a fox", seconds="6", size="1280x720")
    assert await reel.cancel(job) is False


async def test_reel_refusals_are_the_providers_own(build: Any) -> None:
    reel = build("reel", "amazon.nova-reel-v1:0")
    with pytest.raises(InvalidRequest, match="MULTI_SHOT_AUTOMATED is not a valid enum value"):
        await reel.submit(prompt="a fox", seconds="12", size="1280x720")
    unknown = build("reel", "amazon.nova-reel-v9:0")
    with pytest.raises(InvalidRequest, match=r"The provided model identifier is invalid\."):
        await unknown.submit(prompt="a fox", seconds="6", size="1280x720")


async def test_reel_with_a_wrong_secret_is_refused_by_the_signature_check(
    build: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    reel = build("reel", REEL)
    with pytest.raises(UpstreamError, match="signature we calculated does not match"):
        await reel.submit(prompt="a fox", seconds="6", size="1280x720")


async def test_reel_with_a_bedrock_api_key(build: Any, fake_reel: FakeBedrockVideos) -> None:
    from pydantic import SecretStr

    reel = build("reel", REEL, api_key=SecretStr(fake_reel.api_key))
    job = await reel.submit(prompt="a fox", seconds="6", size="1280x720")
    assert header(fake_reel.last("/async-invoke"), "Authorization") == "Bearer " + fake_reel.api_key
    assert (await poll_until_done(reel, job))[-1].status == "completed"
    assert await reel.content(job) == mp4("a fox")  # S3 is read with the deployment's AWS credentials


async def test_reel_reads_s3_with_the_deployments_credentials(
    build: Any, fake_reel: FakeBedrockVideos, s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bedrock is reached with its API key, S3 with the AWS credentials the chain finds: the wrong secret is
    refused by S3's own signature check, and the gateway says so without a video."""
    from pydantic import SecretStr

    reel = build("reel", REEL, api_key=SecretStr(fake_reel.api_key))
    job = await reel.submit(prompt="a fox", seconds="6", size="1280x720")
    assert (await poll_until_done(reel, job))[-1].status == "completed"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    wrong = build("reel", REEL, api_key=SecretStr(fake_reel.api_key))
    with pytest.raises(GatewayError, match="SignatureDoesNotMatch"):
        await wrong.content(job)


# --- Replicate (predictions) ---


async def test_replicate_job_from_submit_to_video(build: Any, fake_replicate: FakeReplicate) -> None:
    rep = build("rep", REPLICATE_MODEL)
    job = await rep.submit(prompt="a fox on a hill", seconds="8", size="1280x720")
    sent = fake_replicate.last("/predictions")
    assert sent.path == "/v1/models/google/veo-3/predictions"
    assert header(sent, "Authorization") == "Bearer r8_fake_token"
    assert sent.body == {
        "input": {"prompt": "a fox on a hill", "duration": 8, "aspect_ratio": "16:9", "resolution": "720p"}
    }
    seen = await poll_until_done(rep, job)
    assert seen == [
        JobStatus("in_progress", 33),
        JobStatus("in_progress", 66),
        JobStatus("completed", 100, seconds=8, size="1280x720"),
    ]
    assert await rep.content(job) == mp4("a fox on a hill")
    delivery = fake_replicate.last("/output.mp4")
    assert header(delivery, "authorization") is None  # the token never leaves the API's own host


async def test_replicate_by_version(build: Any, fake_replicate: FakeReplicate) -> None:
    rep = build("rep", f"{REPLICATE_MODEL}:{rep_fake.VERSION}")
    job = await rep.submit(prompt="a fox")
    assert fake_replicate.last("/predictions").body["version"] == rep_fake.VERSION
    assert (await poll_until_done(rep, job))[-1].status == "completed"


async def test_replicate_job_that_fails_upstream_fails_with_its_message(build: Any) -> None:
    rep = build("rep", REPLICATE_MODEL)
    job = await rep.submit(prompt="FAIL here")
    assert (await poll_until_done(rep, job))[-1] == JobStatus("failed", 0, error=rep_fake.FAILURE)


async def test_replicate_cancel(build: Any, fake_replicate: FakeReplicate) -> None:
    rep = build("rep", REPLICATE_MODEL)
    job = await rep.submit(prompt="a fox")
    assert await rep.cancel(job) is True
    assert fake_replicate.last("/cancel").path == f"/v1/predictions/{job.upstream_id}/cancel"
    assert await rep.status(job) == JobStatus("failed", 0, error="the prediction was canceled")
    done = await rep.submit(prompt="a fox")
    await poll_until_done(rep, done)
    assert await rep.cancel(done) is False  # already finished: nothing to cancel


async def test_replicate_refusals_are_the_providers_own(build: Any) -> None:
    rep = build("rep", REPLICATE_MODEL)
    with pytest.raises(InvalidRequest) as err:
        await rep.submit(prompt="a fox", seconds="5")
    assert err.value.status == 422
    assert err.value.message == "- input.duration: duration must be one of the following: 4, 6, 8\n"
    missing = build("rep", "someone/nothing")
    with pytest.raises(InvalidRequest, match="could not be found") as err:
        await missing.submit(prompt="a fox")
    assert err.value.status == 404


async def test_replicate_with_a_wrong_token_is_refused_upstream(build: Any) -> None:
    from pydantic import SecretStr

    rep = build("rep", REPLICATE_MODEL, api_key=SecretStr("r8_wrong"))
    with pytest.raises(UpstreamError, match="You did not pass a valid authentication token"):
        await rep.submit(prompt="a fox")


async def test_a_deployment_the_provider_cannot_run_is_unavailable_not_a_crash(build: Any) -> None:
    reel = build("reel", REEL, options={"region": "us-east-1"})  # no output_s3_uri
    with pytest.raises(Unavailable, match=r"set options\.output_s3_uri"):
        await reel.submit(prompt="a fox", seconds="6", size="1280x720")
    rep = build("rep", "veo-3")  # not owner/name
    with pytest.raises(Unavailable, match="not a Replicate model"):
        await rep.submit(prompt="a fox")
