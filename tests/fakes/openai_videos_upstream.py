"""A strict fake of OpenAI's video API (Sora): `/v1/videos` as openai/openai-openapi describes it.

What it checks, as the real one does: the bearer key (one of `keys`; and every later call on a job must
carry the key that created it, as a job belongs to its creator's project: another key gets a 404, and the
call is counted in `wrong_key`), `model` (sora-2, sora-2-pro), `prompt` (1 to 32000 characters), `seconds`
("4", "8", "12" as strings), `size` (sora-2: 720x1280 and 1280x720; sora-2-pro also 1024x1792 and
1792x1024), `input_reference` (an uploaded png/jpeg/webp in a multipart body, or `{image_url | file_id}` in
JSON), no unknown fields. Errors in OpenAI's shape.

A job moves queued → in_progress → completed after `polls_needed` status calls and `duration_s` seconds;
a prompt containing "FAIL" (or `fail_next`) fails it with `failure_message`; one containing "HOLD" runs until
deleted. What a test asserts on:
`polls[id]` (status calls per job), `max_in_flight[id]` (most status calls on one job at once: a gateway
whose replicas poll a job together shows more than 1), `cancelled`, `wrong_key`, `created` (the key and
body of each job), `content_bytes(id, variant)` (what the content route serves).
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.server import BackgroundServer

MODELS = {"sora-2": {"720x1280", "1280x720"}, "sora-2-pro": {"720x1280", "1280x720", "1024x1792", "1792x1024"}}
SECONDS = {"4", "8", "12"}
FIELDS = {"model", "prompt", "seconds", "size", "input_reference"}
IMAGE_MAGIC = {b"\x89PNG": "image/png", b"\xff\xd8\xff": "image/jpeg", b"RIFF": "image/webp"}
CONTENT_TYPES = {"video": "video/mp4", "thumbnail": "image/webp", "spritesheet": "image/jpeg"}
MAGIC = {
    "video": b"\x00\x00\x00\x18ftypmp42",
    "thumbnail": b"RIFF\x00\x00\x00\x00WEBPVP8 ",
    "spritesheet": b"\xff\xd8\xff\xe0",
}


def _error(status: int, message: str, param: str | None = None, code: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    return web.json_response(body, status=status)


@dataclass
class Job:
    id: str
    key: str
    model: str
    prompt: str
    seconds: str
    size: str
    created_at: float
    remixed_from: str | None = None
    fail: bool = False
    polls: int = 0
    status: str = "queued"
    progress: int = 0
    completed_at: float | None = None
    error: dict[str, str] | None = None


@dataclass
class FakeSora:
    keys: set[str] = field(default_factory=lambda: {"sk-sora-test"})
    polls_needed: int = 3
    duration_s: float = 0.0
    status_delay_s: float = 0.0  # each status call takes this long (to catch two replicas polling one job)
    content_bytes_size: int = 300_000
    failure_message: str = "Your request was blocked by our moderation system."
    fail_next: bool = False
    create_delay_s: float = 0.0  # each create takes this long...
    create_error: int | None = None  # ...and then answers this status, if set (a provider failing)
    jobs: dict[str, Job] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)
    in_flight: dict[str, int] = field(default_factory=dict)
    max_in_flight: dict[str, int] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    wrong_key: list[tuple[str, str]] = field(default_factory=list)
    created: list[dict[str, Any]] = field(default_factory=list)
    downloads: dict[str, int] = field(default_factory=dict)
    port: int = 0
    _server: BackgroundServer | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeSora:
        self._server = BackgroundServer(self.routes(), "sora")
        self.port = self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/videos", self.create),
            web.get("/v1/videos/{id}", self.retrieve),
            web.delete("/v1/videos/{id}", self.delete),
            web.get("/v1/videos/{id}/content", self.content),
            web.post("/v1/videos/{id}/remix", self.remix),
        ]

    def content_bytes(self, job_id: str, variant: str = "video") -> bytes:
        """What the content route serves for a job: a format's magic, then bytes derived from the job id."""
        size = self.content_bytes_size if variant == "video" else 2048
        seed = hashlib.sha256(f"{job_id}/{variant}".encode()).digest()
        body = (seed * (size // len(seed) + 1))[:size]
        return MAGIC[variant] + body

    # ---- checks ----------------------------------------------------------------------------------------

    def _key(self, request: web.Request) -> str | web.Response:
        auth = request.headers.get("Authorization", "")
        key = auth.removeprefix("Bearer ")
        if not auth.startswith("Bearer ") or key not in self.keys:
            return _error(401, "Incorrect API key provided.", code="invalid_api_key")
        return key

    def _job(self, request: web.Request) -> Job | web.Response:
        """The job the path names, asked for with the key that created it; else the API's 401 or 404."""
        key = self._key(request)
        if isinstance(key, web.Response):
            return key
        job = self.jobs.get(request.match_info["id"])
        if job is not None and job.key != key:
            self.wrong_key.append((job.id, key))
            job = None
        if job is None:
            return _error(404, f"Video with id '{request.match_info['id']}' not found.", "video_id", "not_found")
        return job

    async def _body(self, request: web.Request) -> dict[str, Any] | web.Response:
        kind = request.content_type
        if kind == "application/json":
            try:
                data = orjson.loads(await request.read())
            except orjson.JSONDecodeError:
                return _error(400, "We could not parse the JSON body of your request.")
            if not isinstance(data, dict):
                return _error(400, "The body must be a JSON object.")
            return data
        if kind == "multipart/form-data":
            form = await request.post()
            data = {}
            for name, value in form.items():
                if isinstance(value, web.FileField):
                    head = value.file.read(16)
                    found = next((t for m, t in IMAGE_MAGIC.items() if head.startswith(m)), None)
                    if name != "input_reference" or found is None:
                        return _error(400, f"Invalid file for '{name}': expected an image.", name)
                    data[name] = {"upload": found, "filename": value.filename}
                else:
                    data[name] = value
            return data
        return _error(415, f"Unsupported content type {kind!r}.")

    def _invalid(self, data: dict[str, Any]) -> web.Response | None:
        unknown = sorted(set(data) - FIELDS)
        if unknown:
            return _error(400, f"Unknown parameter: '{unknown[0]}'.", unknown[0], "unknown_parameter")
        model = data.get("model", "sora-2")
        if model not in MODELS:
            return _error(400, f"Invalid value for 'model': {model!r}.", "model", "invalid_value")
        prompt = data.get("prompt")
        if not isinstance(prompt, str) or not 1 <= len(prompt) <= 32000:
            return _error(400, "Missing or invalid 'prompt'.", "prompt")
        seconds = data.get("seconds", "4")
        if not isinstance(seconds, str) or seconds not in SECONDS:
            return _error(400, f"Invalid value for 'seconds': {seconds!r}. Supported: '4', '8', '12'.", "seconds")
        size = data.get("size", "720x1280")
        if size not in MODELS[model]:
            return _error(400, f"Invalid value for 'size': {size!r} is not supported by {model}.", "size")
        ref = data.get("input_reference")
        if ref is not None and not (isinstance(ref, dict) and ("upload" in ref or len(ref) == 1)):
            return _error(400, "input_reference: provide exactly one of image_url or file_id.", "input_reference")
        return None

    # ---- routes ----------------------------------------------------------------------------------------

    def _new(self, key: str, data: dict[str, Any], remixed_from: str | None = None) -> Job:
        job = Job(
            "video_" + secrets.token_hex(12), key, data.get("model", "sora-2"), data["prompt"],
            data.get("seconds", "4"), data.get("size", "720x1280"), time.time(), remixed_from,
            fail=self.fail_next or "FAIL" in data["prompt"],
        )  # fmt: skip
        self.fail_next = False
        self.jobs[job.id] = job
        self.created.append({"id": job.id, "key": key, "body": data})
        return job

    async def create(self, request: web.Request) -> web.Response:
        key = self._key(request)
        if isinstance(key, web.Response):
            return key
        data = await self._body(request)
        if isinstance(data, web.Response):
            return data
        bad = self._invalid(data)
        if bad is not None:
            return bad
        if self.create_delay_s:
            await asyncio.sleep(self.create_delay_s)
        if self.create_error is not None:
            body = {
                "error": {"message": "The server had an error.", "type": "server_error", "param": None, "code": None}
            }
            return web.json_response(body, status=self.create_error)
        return web.json_response(self._object(self._new(key, data)))

    async def remix(self, request: web.Request) -> web.Response:
        source = self._job(request)
        if isinstance(source, web.Response):
            return source
        data = await self._body(request)
        if isinstance(data, web.Response):
            return data
        if set(data) != {"prompt"} or not isinstance(data["prompt"], str) or not data["prompt"]:
            return _error(400, "A remix takes exactly one field, 'prompt'.", "prompt")
        if source.status != "completed":
            return _error(400, "Only a completed video can be remixed.", "video_id")
        body = {"model": source.model, "prompt": data["prompt"], "seconds": source.seconds, "size": source.size}
        return web.json_response(self._object(self._new(source.key, body, source.id)))

    async def retrieve(self, request: web.Request) -> web.Response:
        job = self._job(request)
        if isinstance(job, web.Response):
            return job
        self.polls[job.id] = self.polls.get(job.id, 0) + 1
        self.in_flight[job.id] = self.in_flight.get(job.id, 0) + 1
        self.max_in_flight[job.id] = max(self.max_in_flight.get(job.id, 0), self.in_flight[job.id])
        try:
            if self.status_delay_s:
                await asyncio.sleep(self.status_delay_s)
            self._advance(job)
            return web.json_response(self._object(job))
        finally:
            self.in_flight[job.id] -= 1

    def _advance(self, job: Job) -> None:
        if job.status in ("completed", "failed") or job.id in self.cancelled:
            return
        job.polls += 1
        if job.fail and job.polls >= 2:
            job.status, job.error = "failed", {"code": "moderation_blocked", "message": self.failure_message}
            return
        held = "HOLD" in job.prompt  # never finishes: a job a test deletes while it runs
        ready = not held and job.polls >= self.polls_needed and time.time() >= job.created_at + self.duration_s
        if ready:
            job.status, job.progress, job.completed_at = "completed", 100, time.time()
        else:
            job.status = "in_progress"
            job.progress = min(95, job.progress + max(1, 90 // max(self.polls_needed, 1)))

    async def delete(self, request: web.Request) -> web.Response:
        job = self._job(request)
        if isinstance(job, web.Response):
            return job
        self.cancelled.append(job.id)
        del self.jobs[job.id]
        return web.json_response({"id": job.id, "object": "video.deleted", "deleted": True})

    async def content(self, request: web.Request) -> web.StreamResponse:
        job = self._job(request)
        if isinstance(job, web.Response):
            return job
        variant = request.query.get("variant", "video")
        if variant not in CONTENT_TYPES:
            return _error(400, f"Invalid value for 'variant': {variant!r}.", "variant")
        if job.status != "completed":
            return _error(404, "Video is not ready yet; its content is available once it is completed.", "video_id")
        data = self.content_bytes(job.id, variant)
        self.downloads[f"{job.id}/{variant}"] = self.downloads.get(f"{job.id}/{variant}", 0) + 1
        resp = web.StreamResponse(headers={"Content-Type": CONTENT_TYPES[variant]})
        resp.content_length = len(data)
        await resp.prepare(request)
        for i in range(0, len(data), 65536):
            await resp.write(data[i : i + 65536])
        await resp.write_eof()
        return resp

    def _object(self, job: Job) -> dict[str, Any]:
        return {
            "id": job.id, "object": "video", "model": job.model, "status": job.status, "progress": job.progress,
            "created_at": int(job.created_at),
            "completed_at": None if job.completed_at is None else int(job.completed_at), "expires_at": None,
            "prompt": job.prompt, "seconds": job.seconds, "size": job.size,
            "remixed_from_video_id": job.remixed_from, "error": job.error,
        }  # fmt: skip
