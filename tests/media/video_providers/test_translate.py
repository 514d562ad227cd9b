"""The pure translators of the three video job APIs, as tables: OpenAI's request in, the provider's body out;
the provider's job in, a `JobStatus` out; what each provider cannot make refused, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from inferplex.errors import InvalidRequest
from inferplex.families.videos import JobStatus, VideoRequest
from inferplex.translate import bedrock_videos as reel
from inferplex.translate import gemini_videos as veo
from inferplex.translate import tasks_videos as rep


def req(**body: Any) -> VideoRequest:
    return VideoRequest.model_validate({"model": "clip", "prompt": "a fox", **body})


@pytest.mark.parametrize(
    "body,image,expected",
    [
        (
            {},
            None,
            {
                "instances": [{"prompt": "a fox"}],
                "parameters": {"aspectRatio": "9:16", "durationSeconds": 4, "resolution": "720p"},
            },
        ),
        (
            {"size": "1280x720", "seconds": "8"},
            None,
            {
                "instances": [{"prompt": "a fox"}],
                "parameters": {"aspectRatio": "16:9", "durationSeconds": 8, "resolution": "720p"},
            },
        ),
        (
            {"size": "1920x1080", "seconds": "8"},
            None,
            {
                "instances": [{"prompt": "a fox"}],
                "parameters": {"aspectRatio": "16:9", "durationSeconds": 8, "resolution": "1080p"},
            },
        ),
        (
            {"size": "1080x1920", "seconds": "6"},
            ("image/png", "iVBO"),
            {
                "instances": [{"prompt": "a fox", "image": {"bytesBase64Encoded": "iVBO", "mimeType": "image/png"}}],
                "parameters": {"aspectRatio": "9:16", "durationSeconds": 6, "resolution": "1080p"},
            },
        ),
    ],
)
def test_veo_body(body: dict[str, Any], image: tuple[str, str] | None, expected: dict[str, Any]) -> None:
    assert veo.build_request(req(**body), image) == expected


@pytest.mark.parametrize(
    "body,param,words",
    [
        ({"size": "1792x1024"}, "size", "is not one Veo makes"),
        ({"size": "1024x1024"}, "size", "1280x720, 720x1280, 1920x1080, 1080x1920"),
        ({"seconds": "12"}, "seconds", "4 to 8"),
        ({"seconds": "3"}, "seconds", "4 to 8"),
    ],
)
def test_veo_refuses_what_it_cannot_make(body: dict[str, Any], param: str, words: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        veo.build_request(req(**body))
    assert err.value.param == param and words in err.value.message and err.value.status == 400


DONE = "type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse"


@pytest.mark.parametrize(
    "operation,expected",
    [
        ({"name": "models/v/operations/1"}, JobStatus("in_progress", 0)),
        ({"name": "models/v/operations/1", "done": False}, JobStatus("in_progress", 0)),
        (
            {
                "done": True,
                "response": {
                    "@type": DONE,
                    "generateVideoResponse": {
                        "generatedSamples": [{"video": {"uri": "https://x/v1beta/files/abc:download?alt=media"}}]
                    },
                },
            },
            JobStatus("completed", 100, seconds=8, size="1280x720"),
        ),
        (
            {"done": True, "error": {"code": 13, "message": "Video generation failed."}},
            JobStatus("failed", 0, error="Video generation failed."),
        ),
        ({"done": True, "error": {"code": 3}}, JobStatus("failed", 0, error="operation failed (code 3)")),
        (
            {
                "done": True,
                "response": {
                    "generateVideoResponse": {"raiMediaFilteredCount": 1, "raiMediaFilteredReasons": ["unsafe audio"]}
                },
            },
            JobStatus("failed", 0, error="unsafe audio"),
        ),
        ({"done": True, "response": {}}, JobStatus("failed", 0, error="the operation finished without a video")),
    ],
)
def test_veo_operation_status(operation: dict[str, Any], expected: JobStatus) -> None:
    assert veo.status(operation, 8, "1280x720") == expected


@pytest.mark.parametrize(
    "uri,name",
    [
        ("https://generativelanguage.googleapis.com/v1beta/files/3xk9q2:download?alt=media", "3xk9q2"),
        ("files/abc123", "abc123"),
    ],
)
def test_veo_file_names(uri: str, name: str) -> None:
    assert veo.file_name(uri) == name


def test_veo_answers_that_are_not_its_own_are_errors() -> None:
    for bad in ({}, {"name": "x"}, []):
        with pytest.raises(ValueError):
            veo.operation_name(bad)
    with pytest.raises(ValueError):
        veo.status("done", None, None)
    with pytest.raises(ValueError):
        veo.file_name("https://evil.example/video.mp4")


@pytest.mark.parametrize(
    "body,image,model_input",
    [
        (
            {"seconds": "6", "size": "1280x720"},
            None,
            {
                "taskType": "TEXT_VIDEO",
                "textToVideoParams": {"text": "a fox"},
                "videoGenerationConfig": {"durationSeconds": 6, "fps": 24, "dimension": "1280x720", "seed": 7},
            },
        ),
        (
            {"seconds": "6", "size": "1280x720"},
            ("image/jpeg", "/9j/"),
            {
                "taskType": "TEXT_VIDEO",
                "textToVideoParams": {"text": "a fox", "images": [{"format": "jpeg", "source": {"bytes": "/9j/"}}]},
                "videoGenerationConfig": {"durationSeconds": 6, "fps": 24, "dimension": "1280x720", "seed": 7},
            },
        ),
        (
            {"seconds": "12", "size": "1280x720"},
            None,
            {
                "taskType": "MULTI_SHOT_AUTOMATED",
                "multiShotAutomatedParams": {"text": "a fox"},
                "videoGenerationConfig": {"durationSeconds": 12, "fps": 24, "dimension": "1280x720", "seed": 7},
            },
        ),
    ],
)
def test_nova_reel_body(body: dict[str, Any], image: tuple[str, str] | None, model_input: dict[str, Any]) -> None:
    out = reel.build_request(req(**body), "amazon.nova-reel-v1:1", "s3://b/p", "tok-1", image, 7)
    assert out == {
        "modelId": "amazon.nova-reel-v1:1",
        "modelInput": model_input,
        "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": "s3://b/p"}},
        "clientRequestToken": "tok-1",
    }


@pytest.mark.parametrize(
    "body,image,param",
    [
        ({"seconds": "4", "size": "1280x720"}, None, "seconds"),
        ({"seconds": "8", "size": "1280x720"}, None, "seconds"),
        ({"seconds": "126", "size": "1280x720"}, None, "seconds"),
        ({"seconds": "6"}, None, "size"),
        ({"seconds": "6", "size": "1792x1024"}, None, "size"),
        ({"seconds": "6", "size": "1280x720", "prompt": "x" * 513}, None, "prompt"),
        ({"seconds": "12", "size": "1280x720"}, ("image/png", "iVBO"), "input_reference"),
        ({"seconds": "6", "size": "1280x720"}, ("image/webp", "UklG"), "input_reference"),
    ],
)
def test_nova_reel_refuses_what_it_cannot_make(body: dict[str, Any], image: tuple[str, str] | None, param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        reel.build_request(req(**body), "amazon.nova-reel-v1:1", "s3://b/p", "t", image)
    assert err.value.param == param


ARN = "arn:aws:bedrock:us-east-1:123456789012:async-invoke/abcdef012345"


def test_the_invocation_arn_is_one_percent_encoded_path_label() -> None:
    assert reel.invocation_path(ARN) == (
        "/async-invoke/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Aasync-invoke%2Fabcdef012345"
    )


@pytest.mark.parametrize(
    "answer,expected",
    [
        ({"status": "InProgress"}, JobStatus("in_progress", 0)),
        ({"status": "Completed"}, JobStatus("completed", 100, seconds=6, size="1280x720")),
        ({"status": "Failed", "failureMessage": "bad prompt"}, JobStatus("failed", 0, error="bad prompt")),
        ({"status": "Failed"}, JobStatus("failed", 0, error="the invocation failed")),
    ],
)
def test_nova_reel_status(answer: dict[str, Any], expected: JobStatus) -> None:
    assert reel.status(answer, 6) == expected


@pytest.mark.parametrize(
    "uri,location",
    [
        ("s3://bucket/prefix", ("bucket", "prefix/abcdef012345/output.mp4")),
        ("s3://bucket/a/b/", ("bucket", "a/b/abcdef012345/output.mp4")),
        ("s3://bucket", ("bucket", "abcdef012345/output.mp4")),
    ],
)
def test_nova_reel_output_location(uri: str, location: tuple[str, str]) -> None:
    answer = {"outputDataConfig": {"s3OutputDataConfig": {"s3Uri": uri}}}
    assert reel.output_location(answer, ARN) == location


def test_nova_reel_unknown_answers_are_errors() -> None:
    with pytest.raises(ValueError):
        reel.status({"status": "Paused"}, 6)
    with pytest.raises(ValueError):
        reel.output_location({}, ARN)


VERSION = "a" * 64


@pytest.mark.parametrize(
    "model,endpoint",
    [
        ("google/veo-3", ("/models/google/veo-3/predictions", None)),
        (f"google/veo-3:{VERSION}", ("/predictions", VERSION)),
        (VERSION, ("/predictions", VERSION)),
    ],
)
def test_replicate_endpoints(model: str, endpoint: tuple[str, str | None]) -> None:
    assert rep.endpoint(model) == endpoint


@pytest.mark.parametrize("model", ["veo-3", "a/b/c", "/veo", "google/"])
def test_replicate_refuses_a_model_that_is_not_one(model: str) -> None:
    with pytest.raises(ValueError):
        rep.endpoint(model)


@pytest.mark.parametrize(
    "model,body,image,expected",
    [
        (
            "google/veo-3",
            {},
            None,
            {"input": {"prompt": "a fox", "duration": 4, "aspect_ratio": "9:16", "resolution": "720p"}},
        ),
        (
            f"google/veo-3:{VERSION}",
            {"size": "1920x1080", "seconds": "8"},
            "data:image/png;base64,iVBO",
            {
                "version": VERSION,
                "input": {
                    "prompt": "a fox",
                    "duration": 8,
                    "aspect_ratio": "16:9",
                    "resolution": "1080p",
                    "image": "data:image/png;base64,iVBO",
                },
            },
        ),
    ],
)
def test_replicate_body(model: str, body: dict[str, Any], image: str | None, expected: dict[str, Any]) -> None:
    assert rep.build_request(req(**body), model, image) == expected


def test_replicate_refuses_a_size_it_cannot_name() -> None:
    with pytest.raises(InvalidRequest) as err:
        rep.build_request(req(size="1792x1024"), "google/veo-3")
    assert err.value.param == "size"


BAR = "  0%|          | 0/4 [00:00<?, ?it/s]\n 50%|#####     | 2/4 [00:01<00:01]\nSaving video"


@pytest.mark.parametrize(
    "prediction,expected",
    [
        ({"status": "starting", "logs": ""}, JobStatus("queued", 0)),
        ({"status": "processing", "logs": None}, JobStatus("in_progress", 0)),
        ({"status": "processing", "logs": BAR}, JobStatus("in_progress", 50)),
        ({"status": "processing", "logs": "100%|##########| 4/4 [00:02<00:00]"}, JobStatus("in_progress", 99)),
        (
            {"status": "succeeded", "output": "https://replicate.delivery/x/out.mp4"},
            JobStatus("completed", 100, seconds=4, size="720x1280"),
        ),
        (
            {"status": "succeeded", "output": ["https://replicate.delivery/x/out.mp4"]},
            JobStatus("completed", 100, seconds=4, size="720x1280"),
        ),
        (
            {"status": "succeeded", "output": None},
            JobStatus("failed", 0, error="the prediction succeeded without an output"),
        ),
        ({"status": "failed", "error": "CUDA out of memory"}, JobStatus("failed", 0, error="CUDA out of memory")),
        ({"status": "canceled"}, JobStatus("failed", 0, error="the prediction was canceled")),
    ],
)
def test_replicate_status(prediction: dict[str, Any], expected: JobStatus) -> None:
    assert rep.status(prediction, 4, "720x1280") == expected


def test_replicate_unknown_status_is_an_error() -> None:
    with pytest.raises(ValueError):
        rep.status({"status": "booting"}, 4, None)
