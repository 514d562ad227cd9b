"""Nova Reel video jobs on the Bedrock adapter (`families/videos.VideoAdapter`): StartAsyncInvoke,
GetAsyncInvoke, and the finished video read from the S3 bucket Bedrock wrote it to.

A mixin of `providers/bedrock.Bedrock` (its region, base URL, session, `ERRORS` and credentials: SigV4 with
botocore's chain, or the provider's Bedrock API key as a bearer token); translation lives in
`translate/bedrock_videos.py`. Options of the provider: `output_s3_uri` (required for video: `s3://bucket/
prefix`, where Bedrock writes each invocation's folder) and `s3_endpoint_url` (an S3-compatible endpoint
instead of AWS's). The video is read from S3 with aiobotocore (the `s3` extra, as the media store's S3
backend) and the deployment's AWS credentials, streamed; Bedrock has no StopAsyncInvoke, so `video_cancel`
reports False.
"""

from __future__ import annotations

import re
import secrets
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson

from inferplex.config import ProviderConfig
from inferplex.errors import NotFound, Unavailable
from inferplex.families.videos import JobStatus, UpstreamJob, VideoRequest
from inferplex.gateway_request import GatewayRequest
from inferplex.providers import video_jobs
from inferplex.providers.base import CallInfo
from inferplex.providers.failures import ErrorMap
from inferplex.targets import Target
from inferplex.translate import bedrock_videos as tr

_ARN = re.compile(r"^arn:aws(-[^:]+)?:bedrock:[a-z0-9-]{1,20}:[0-9]{12}:async-invoke/[a-z0-9]{12}$")
_S3_ERRORS = ErrorMap(type_status={"NoSuchKey": 404, "NoSuchBucket": 404, "AccessDenied": 403})


class BedrockVideos:
    config: ProviderConfig
    errors: ErrorMap
    region: str
    _base: str
    _session: aiohttp.ClientSession
    _credentials: Any

    def _aws_credentials(self) -> Any:
        if self._credentials is None:
            import botocore.session  # type: ignore[import-untyped]

            self._credentials = botocore.session.Session(profile=self.config.options.get("profile")).get_credentials()
            if self._credentials is None:
                raise Unavailable(f"provider {self.config.name}: no AWS credentials found")
        return self._credentials

    def _signed(self, method: str, url: str, payload: bytes) -> dict[str, str]:
        """Headers for a Bedrock runtime call: the API key as a bearer token, else SigV4 (service `bedrock`)."""
        headers = {"accept": "application/json", **self.config.headers}
        if payload:
            headers["content-type"] = "application/json"
        if self.config.api_key is not None:
            return {**headers, "authorization": "Bearer " + self.config.api_key.get_secret_value()}
        from botocore.auth import SigV4Auth  # type: ignore[import-untyped]
        from botocore.awsrequest import AWSRequest  # type: ignore[import-untyped]

        request = AWSRequest(method=method, url=url, data=payload, headers=headers)
        SigV4Auth(self._aws_credentials().get_frozen_credentials(), "bedrock", self.region).add_auth(request)
        return dict(request.headers.items())

    def _output_uri(self) -> str:
        uri = self.config.options.get("output_s3_uri")
        if not isinstance(uri, str) or not uri.startswith("s3://"):
            raise Unavailable(
                f"provider {self.config.name} is not set up for video: set options.output_s3_uri (s3://bucket/prefix)"
            )
        return uri.rstrip("/")

    async def video_submit(self, request: GatewayRequest[VideoRequest], target: Target, info: CallInfo) -> UpstreamJob:
        image = await video_jobs.reference_image(request.body)
        seed = secrets.randbelow(2_147_483_647)
        body = tr.build_request(
            request.body,
            target.upstream_model,
            self._output_uri(),
            info.idempotency_key or str(uuid.uuid4()),
            None if image is None else (image.mime, image.b64),
            seed,
        )
        url = self._base + "/async-invoke"
        payload = orjson.dumps(body)
        data = await video_jobs.request_json(
            target, info.timeouts, self._session, "POST", url, self._signed("POST", url, payload), self.errors, body
        )
        arn = data.get("invocationArn") if isinstance(data, dict) else None
        if not isinstance(arn, str) or not _ARN.match(arn):
            raise self.errors.malformed("answered StartAsyncInvoke without an invocation ARN")
        return UpstreamJob(arn, {"seconds": int(request.body.seconds)})

    async def _invocation(self, job: UpstreamJob, target: Target, info: CallInfo) -> dict[str, Any]:
        url = self._base + tr.invocation_path(job.upstream_id)
        return await video_jobs.get_object(
            target,
            info.timeouts,
            self._session,
            "GET",
            url,
            self._signed("GET", url, b""),
            self.errors,
            "an invocation",
        )

    async def video_status(self, job: UpstreamJob, target: Target, info: CallInfo) -> JobStatus:
        data = await self._invocation(job, target, info)
        return video_jobs.parsed(self.errors, tr.status, data, job.state.get("seconds"))

    async def video_content(
        self, job: UpstreamJob, variant: str, target: Target, info: CallInfo
    ) -> AsyncIterator[bytes]:
        video_jobs.only_video(variant, self.config.name)
        data = await self._invocation(job, target, info)
        if data.get("status") != "Completed":
            raise NotFound("the video is not ready", code="not_found")
        bucket, key = video_jobs.parsed(self.errors, tr.output_location, data, job.upstream_id)
        async for piece in self._s3_object(bucket, key, target, info):
            yield piece

    async def _s3_object(self, bucket: str, key: str, target: Target, info: CallInfo) -> AsyncIterator[bytes]:
        """The object's bytes, streamed, read with the deployment's AWS credentials."""
        try:
            from aiobotocore.session import get_session
            from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]
        except ImportError:
            raise Unavailable(
                f"provider {self.config.name}: Bedrock video needs aiobotocore: pip install 'inferplex[s3]'"
            ) from None
        creds = self._aws_credentials().get_frozen_credentials()
        client_args = {
            "region_name": self.region,
            "endpoint_url": self.config.options.get("s3_endpoint_url"),
            "aws_access_key_id": creds.access_key,
            "aws_secret_access_key": creds.secret_key,
            "aws_session_token": creds.token,
        }
        errors = _S3_ERRORS.bind(self.config.name)
        async with get_session().create_client("s3", **client_args) as client:
            try:
                answer = await video_jobs.within(
                    target, info.timeouts, lambda _: client.get_object(Bucket=bucket, Key=key)
                )
            except ClientError as exc:
                err = exc.response.get("Error", {})
                message = f"S3 {err.get('Code')}: {err.get('Message') or 'the video could not be read'}"
                raise errors.typed(str(err.get("Code")), message) from exc
            except BotoCoreError as exc:
                raise errors.transport(exc) from exc
            body = answer["Body"]
            try:
                async for chunk in body.iter_chunks(video_jobs.CHUNK):
                    yield chunk
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise errors.transport(exc) from exc
            finally:
                body.close()

    async def video_cancel(self, job: UpstreamJob, target: Target, info: CallInfo) -> bool:
        """Bedrock has no StopAsyncInvoke (botocore's bedrock-runtime model): the invocation runs on."""
        return False
