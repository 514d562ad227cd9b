"""Media files in an S3-compatible bucket (AWS S3, MinIO, Ceph, R2; tested against moto's server).

aiobotocore is the client: botocore's own request signing and retries, on aiohttp, so no call blocks the
event loop. A write is one PUT when it fits in a part, else a multipart upload of `PART`-sized parts (S3's
smallest part is 5 MiB), aborted if the stream fails or passes its limit: at most one part is held in
memory per upload. A read is a ranged GET streamed in `CHUNK`s.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

from inferplex.config import MediaS3Config
from inferplex.media_store.blobs import CHUNK, TooLarge

PART = 8 * 1024 * 1024


class S3Blobs:
    name = "s3"

    def __init__(self, config: MediaS3Config, client: Any, stack: AsyncExitStack) -> None:
        self.bucket = config.bucket
        self.prefix = config.prefix
        self._client = client
        self._stack = stack

    @classmethod
    async def open(cls, config: MediaS3Config) -> S3Blobs:
        secret = config.secret_access_key
        key_id = config.access_key_id
        stack = AsyncExitStack()
        client = await stack.enter_async_context(
            get_session().create_client(
                "s3",
                region_name=config.region,
                endpoint_url=config.endpoint_url,
                aws_access_key_id=key_id.get_secret_value() if key_id else None,
                aws_secret_access_key=secret.get_secret_value() if secret else None,
                config=AioConfig(retries={"max_attempts": 3, "mode": "standard"}, max_pool_connections=64),
            )
        )
        return cls(config, client, stack)

    def _key(self, key: str) -> str:
        return self.prefix + key

    async def put(self, key: str, chunks: AsyncIterable[bytes], max_bytes: int | None) -> int:
        buf = bytearray()
        size = 0
        upload: _Multipart | None = None
        try:
            async for chunk in chunks:
                size += len(chunk)
                if max_bytes is not None and size > max_bytes:
                    raise TooLarge(max_bytes)
                buf += chunk
                if len(buf) >= PART:
                    if upload is None:
                        upload = await _Multipart.start(self._client, self.bucket, self._key(key))
                    await upload.part(bytes(buf))
                    buf.clear()
            if upload is None:
                await self._client.put_object(Bucket=self.bucket, Key=self._key(key), Body=bytes(buf))
            else:
                if buf:
                    await upload.part(bytes(buf))
                await upload.complete()
        except BaseException:
            if upload is not None:
                await upload.abort()
            raise
        return size

    async def get(self, key: str, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
        if end is not None and end <= start:
            return
        span = f"bytes={start}-" + ("" if end is None else str(end - 1))
        answer = await self._client.get_object(Bucket=self.bucket, Key=self._key(key), Range=span)
        body = answer["Body"]
        try:
            async for chunk in body.iter_chunks(CHUNK):
                yield chunk
        finally:
            body.close()

    async def delete(self, key: str) -> None:
        await self._client.delete_object(Bucket=self.bucket, Key=self._key(key))

    async def aclose(self) -> None:
        await self._stack.aclose()


class _Multipart:
    def __init__(self, client: Any, bucket: str, key: str, upload_id: str) -> None:
        self.client, self.bucket, self.key, self.upload_id = client, bucket, key, upload_id
        self.parts: list[dict[str, Any]] = []

    @classmethod
    async def start(cls, client: Any, bucket: str, key: str) -> _Multipart:
        answer = await client.create_multipart_upload(Bucket=bucket, Key=key)
        return cls(client, bucket, key, answer["UploadId"])

    async def part(self, data: bytes) -> None:
        number = len(self.parts) + 1
        answer = await self.client.upload_part(
            Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number, Body=data
        )
        self.parts.append({"ETag": answer["ETag"], "PartNumber": number})

    async def complete(self) -> None:
        await self.client.complete_multipart_upload(
            Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, MultipartUpload={"Parts": self.parts}
        )

    async def abort(self) -> None:
        try:
            await self.client.abort_multipart_upload(Bucket=self.bucket, Key=self.key, UploadId=self.upload_id)
        except Exception:  # the bucket's lifecycle rule (docs/media.md) removes what this could not
            pass


__all__ = ["S3Blobs", "TooLarge"]
