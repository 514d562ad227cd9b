"""A fake Bedrock Runtime for asynchronous invocation (Nova Reel): StartAsyncInvoke and GetAsyncInvoke behind
real SigV4 verification, the finished video written into a real S3-compatible server (moto's).

Shapes follow botocore's bedrock-runtime service model (2023-09-30): `POST /async-invoke` with `modelId`,
`modelInput`, `outputDataConfig.s3OutputDataConfig.s3Uri`, `clientRequestToken` (idempotent: the same token
gives the same invocation) and optional `tags`, answered `{"invocationArn"}`; `GET /async-invoke/<arn
percent-encoded>` answered with `invocationArn`, `modelArn`, `clientRequestToken`, `status` (InProgress |
Completed | Failed), `failureMessage`, `submitTime`, `lastModifiedTime`, `endTime`, `outputDataConfig`. There
is no stop operation. Errors are `{"message"}` with `x-amzn-ErrorType`, as `bedrock_upstream` sends them.

Nova Reel's body (Amazon Nova user guide, video generation): `taskType` TEXT_VIDEO (`textToVideoParams`:
`text` up to 512 characters, at most one `images` entry {format png|jpeg, source.bytes}) or
MULTI_SHOT_AUTOMATED (Nova Reel 1.1: `multiShotAutomatedParams.text` up to 4000 characters);
`videoGenerationConfig`: `durationSeconds` (6 for a single shot; 12 to 120 in steps of 6 for multi-shot),
`fps` 24, `dimension` "1280x720", `seed` 0..2147483646. Anything else is a 400 ValidationException.

An invocation is InProgress for `steps` polls; on the last it becomes Completed and `output.mp4` is PUT at
`<s3Uri>/<invocation id>/output.mp4`, or Failed with a `failureMessage` when the prompt contains `FAIL`.
One whose prompt contains `SLOW` never ends. `polls` counts the polls per ARN.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import re
import secrets
from typing import Any
from urllib.parse import unquote

import orjson
from aiohttp import web
from botocore.credentials import Credentials

from tests.fakes.bedrock_upstream import error, sigv4_error
from tests.fakes.gemini_videos_upstream import mp4
from tests.fakes.server import FakeServer

MODELS = {"amazon.nova-reel-v1:0": {"TEXT_VIDEO"}, "amazon.nova-reel-v1:1": {"TEXT_VIDEO", "MULTI_SHOT_AUTOMATED"}}
TOP = {"modelId", "modelInput", "outputDataConfig", "clientRequestToken", "tags"}
CONFIG = {"durationSeconds", "fps", "dimension", "seed"}
S3_URI = re.compile(r"^s3://[a-z0-9][\.\-a-z0-9]{1,61}[a-z0-9](/.*)?$")
ACCOUNT = "123456789012"
FAILURE = "The model could not generate a video for this request: internal model error."


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _malformed(where: str, what: str) -> str:
    return f"Malformed input request: #{where}: {what}, please reformat your input and try again."


def validate_input(model: str, data: Any) -> str | None:
    """Nova Reel's own checks of `modelInput`."""
    if not isinstance(data, dict):
        return _malformed("", "expected type: JSONObject")
    kind = data.get("taskType")
    if kind not in MODELS[model]:
        return _malformed("/taskType", f"{kind} is not a valid enum value")
    params_key = "textToVideoParams" if kind == "TEXT_VIDEO" else "multiShotAutomatedParams"
    for key in data:
        if key not in {"taskType", params_key, "videoGenerationConfig"}:
            return _malformed("", f"extraneous key [{key}] is not permitted")
    params = data.get(params_key)
    if not isinstance(params, dict) or not isinstance(params.get("text"), str) or not params["text"]:
        return _malformed(f"/{params_key}", "required key [text] not found")
    limit = 512 if kind == "TEXT_VIDEO" else 4000
    if len(params["text"]) > limit:
        return _malformed(f"/{params_key}/text", f"expected maxLength: {limit}, actual: {len(params['text'])}")
    if msg := _images(params.get("images"), kind):
        return msg
    return _config(data.get("videoGenerationConfig"), kind)


def _images(images: Any, kind: str) -> str | None:
    if images is None:
        return None
    if kind != "TEXT_VIDEO" or not isinstance(images, list) or len(images) != 1:
        return _malformed("/textToVideoParams/images", "expected maxItems: 1")
    image = images[0]
    if image.get("format") not in ("png", "jpeg"):
        return _malformed("/textToVideoParams/images/0/format", f"{image.get('format')} is not a valid enum value")
    try:
        raw = base64.b64decode((image.get("source") or {}).get("bytes") or "", validate=True)
    except binascii.Error:
        return "The provided image is not valid base64."
    if not raw:
        return _malformed("/textToVideoParams/images/0/source", "required key [bytes] not found")
    return None


def _config(config: Any, kind: str) -> str | None:
    if not isinstance(config, dict):
        return _malformed("", "required key [videoGenerationConfig] not found")
    for key in config:
        if key not in CONFIG:
            return _malformed("/videoGenerationConfig", f"extraneous key [{key}] is not permitted")
    seconds = config.get("durationSeconds")
    if kind == "TEXT_VIDEO" and seconds != 6:
        return _malformed("/videoGenerationConfig/durationSeconds", f"{seconds} is not a valid enum value")
    if kind != "TEXT_VIDEO" and (not isinstance(seconds, int) or seconds % 6 or not 12 <= seconds <= 120):
        return _malformed("/videoGenerationConfig/durationSeconds", f"{seconds} is not a valid value")
    if config.get("fps", 24) != 24:
        return _malformed("/videoGenerationConfig/fps", f"{config['fps']} is not a valid enum value")
    if config.get("dimension", "1280x720") != "1280x720":
        return _malformed("/videoGenerationConfig/dimension", f"{config['dimension']} is not a valid enum value")
    seed = config.get("seed", 0)
    if not isinstance(seed, int) or not 0 <= seed <= 2147483646:
        return _malformed("/videoGenerationConfig/seed", f"{seed} is not a valid value")
    return None


def validate(body: Any) -> tuple[int, str, str] | None:
    """(status, error type, message) for a StartAsyncInvoke body Bedrock refuses."""
    if not isinstance(body, dict):
        return 400, "ValidationException", "Malformed request body"
    for key in body:
        if key not in TOP:
            return 400, "SerializationException", f'Unrecognized field "{key}"'
    for key in ("modelId", "modelInput", "outputDataConfig"):
        if key not in body:
            return (
                400,
                "ValidationException",
                f"1 validation error detected: Value null at '{key}' failed to satisfy constraint: Member must "
                "not be null",
            )
    if body["modelId"] not in MODELS:
        return 400, "ValidationException", "The provided model identifier is invalid."
    s3 = (body["outputDataConfig"] or {}).get("s3OutputDataConfig") or {}
    if not S3_URI.match(str(s3.get("s3Uri", ""))):
        return (
            400,
            "ValidationException",
            (
                "1 validation error detected: Value at 'outputDataConfig.s3OutputDataConfig.s3Uri' failed to "
                "satisfy constraint: Member must satisfy regular expression pattern"
            ),
        )
    token = body.get("clientRequestToken")
    if token is not None and (not isinstance(token, str) or not 1 <= len(token) <= 256):
        return 400, "ValidationException", "clientRequestToken: Member must have length between 1 and 256"
    if msg := validate_input(body["modelId"], body["modelInput"]):
        return 400, "ValidationException", msg
    return None


class FakeBedrockVideos(FakeServer):
    """`s3` is a botocore S3 client on the S3-compatible server the invocations write their videos to."""

    def __init__(
        self,
        s3: Any,
        access_key: str = "AKIDFAKE",
        secret_key: str = "fake-secret",
        region: str = "us-east-1",
        steps: int = 2,
        video_size: int = 4096,
    ) -> None:
        super().__init__(name="bedrock-videos")
        self.s3 = s3
        self.credentials = Credentials(access_key, secret_key)
        self.region = region
        self.steps = steps
        self.video_size = video_size
        self.api_key = "ABSKQmVkcm9ja0FQSUtleS1mYWtl"
        self.invocations: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, str] = {}
        self.polls: dict[str, int] = {}

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/async-invoke", self.start_async_invoke),
            web.get(r"/async-invoke/{arn:.+}", self.get_async_invoke),
        ]

    def signature_error(self, request: web.Request, raw: bytes) -> str | None:
        return sigv4_error(request, raw, self.credentials, self.region, self.api_key)

    def _refused(self, request: web.Request, raw: bytes) -> web.Response | None:
        if msg := self.signature_error(request, raw):
            kind = "UnrecognizedClientException" if "token" in msg.lower() else "InvalidSignatureException"
            return error(403, kind, msg)
        return None

    async def start_async_invoke(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return error(400, "SerializationException", "Malformed request body")
        self.record(request, body, raw)
        if refused := self._refused(request, raw):
            return refused
        if problem := validate(body):
            return error(*problem)
        token = body.get("clientRequestToken")
        if token in self.tokens:
            return web.json_response({"invocationArn": self.tokens[token]})
        invocation = secrets.token_hex(6)
        arn = f"arn:aws:bedrock:{self.region}:{ACCOUNT}:async-invoke/{invocation}"
        if token is not None:
            self.tokens[token] = arn
        now = _now()
        self.invocations[arn] = {"body": body, "status": "InProgress", "submitTime": now, "lastModifiedTime": now}
        self.polls[arn] = 0
        return web.json_response({"invocationArn": arn})

    async def get_async_invoke(self, request: web.Request) -> web.Response:
        self.record(request, None)
        if refused := self._refused(request, b""):
            return refused
        arn = unquote(request.match_info["arn"])
        if arn not in self.invocations:
            return error(400, "ValidationException", f"Invocation ARN {arn} was not found.")
        self.polls[arn] += 1
        job = self.invocations[arn]
        slow = "SLOW" in str(job["body"]["modelInput"])
        if job["status"] == "InProgress" and self.polls[arn] >= self.steps and not slow:
            self._finish(arn, job)
        return web.json_response(self._described(arn, job))

    def _finish(self, arn: str, job: dict[str, Any]) -> None:
        body = job["body"]
        params = body["modelInput"].get("textToVideoParams") or body["modelInput"].get("multiShotAutomatedParams")
        job["lastModifiedTime"] = job["endTime"] = _now()
        if "FAIL" in params["text"]:
            job["status"], job["failureMessage"] = "Failed", FAILURE
            return
        uri = body["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"]
        bucket, _, prefix = uri[len("s3://") :].partition("/")
        key = "/".join(p for p in (prefix.strip("/"), arn.rsplit("/", 1)[1], "output.mp4") if p)
        self.s3.put_object(Bucket=bucket, Key=key, Body=mp4(params["text"], self.video_size))
        job["status"] = "Completed"

    def _described(self, arn: str, job: dict[str, Any]) -> dict[str, Any]:
        body = job["body"]
        out = {
            "invocationArn": arn,
            "modelArn": f"arn:aws:bedrock:{self.region}::foundation-model/{body['modelId']}",
            "status": job["status"],
            "submitTime": job["submitTime"],
            "lastModifiedTime": job["lastModifiedTime"],
            "outputDataConfig": body["outputDataConfig"],
        }
        for key in ("endTime", "failureMessage"):
            if key in job:
                out[key] = job[key]
        if "clientRequestToken" in body:
            out["clientRequestToken"] = body["clientRequestToken"]
        return out
