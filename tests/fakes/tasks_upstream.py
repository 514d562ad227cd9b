"""A fake Replicate HTTP API (predictions): create, get, cancel, and the delivery of outputs.

Shapes follow replicate-python (`Prediction`, `ReplicateError`) and its recorded cassettes: `POST
/v1/models/<owner>/<name>/predictions` (`{"input"}`) and `POST /v1/predictions` (`{"version", "input"}`), both
answered 201 with the prediction (`id`, `model`, `version`, `input`, `logs`, `output`, `error`, `status`,
`created_at`, `started_at`, `completed_at`, `metrics`, `urls.get` / `urls.cancel`); `GET /v1/predictions/<id>`;
`POST /v1/predictions/<id>/cancel`. Errors are problem details `{"title", "detail", "status"}` (an input the
model refuses: 422 with `invalid_fields`). It refuses a missing or wrong bearer token (401), unknown body
fields, a model or version it does not host (404), and inputs outside the model's schema (422).

The one model hosted is `google/veo-3` (its version `VERSION`): `prompt` (required), `duration` 4 | 6 | 8,
`resolution` 720p | 1080p, `aspect_ratio` 16:9 | 9:16, `negative_prompt`, `image` (a data URL or https
link), `seed`. A prediction is `starting` at creation, `processing` (with a tqdm progress bar in its logs)
until its `steps`-th poll, then `succeeded` with an output URL on this server (`/delivery/...`, no token
needed, as replicate.delivery), or `failed` with an `error` when the prompt contains `FAIL`; one whose
prompt contains `SLOW` stays `processing` until it is canceled. `polls` counts
the polls per prediction.
"""

from __future__ import annotations

import datetime
import secrets
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.gemini_videos_upstream import mp4
from tests.fakes.server import FakeServer

MODEL = "google/veo-3"
VERSION = "6f3a5ac2c7e0e1fb2d1c0f1a8d5f0f7b0b2a3c4d5e6f708192a3b4c5d6e7f809"
SCHEMA: dict[str, tuple[type, tuple[Any, ...] | None]] = {
    "prompt": (str, None),
    "duration": (int, (4, 6, 8)),
    "resolution": (str, ("720p", "1080p")),
    "aspect_ratio": (str, ("16:9", "9:16")),
    "negative_prompt": (str, None),
    "image": (str, None),
    "seed": (int, None),
}
FAILURE = "Prediction failed: the model raised CUDA error: out of memory"


def problem(status: int, title: str, detail: str, **extra: Any) -> web.Response:
    body = {"title": title, "detail": detail, "status": status, **extra}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/problem+json")


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


def invalid_fields(inputs: Any) -> list[dict[str, str]]:
    """The model's schema checks, as Replicate reports them (`invalid_fields`)."""
    if not isinstance(inputs, dict):
        return [{"type": "type", "field": "input", "description": "Invalid type. Expected: object"}]
    found = []
    if not inputs.get("prompt"):
        found.append({"type": "required", "field": "input.prompt", "description": "prompt is required"})
    for key, value in inputs.items():
        if key not in SCHEMA:
            found.append(
                {
                    "type": "additional_property_not_allowed",
                    "field": f"input.{key}",
                    "description": f"Additional property {key} is not allowed",
                }
            )
            continue
        kind, choices = SCHEMA[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            found.append(
                {
                    "type": "invalid_type",
                    "field": f"input.{key}",
                    "description": f"Invalid type. Expected: {'integer' if kind is int else 'string'}",
                }
            )
        elif choices is not None and value not in choices:
            allowed = ", ".join(str(c) for c in choices)
            found.append(
                {
                    "type": "enum",
                    "field": f"input.{key}",
                    "description": f"{key} must be one of the following: {allowed}",
                }
            )
        elif key == "image" and not value.startswith(("data:image/", "https://")):
            found.append({"type": "format", "field": "input.image", "description": "Does not match format 'uri'"})
    return found


class FakeReplicate(FakeServer):
    def __init__(self, token: str = "r8_fake", steps: int = 3, video_size: int = 4096) -> None:
        super().__init__(name="replicate")
        self.token = token
        self.steps = steps
        self.video_size = video_size
        self.predictions: dict[str, dict[str, Any]] = {}
        self.polls: dict[str, int] = {}
        self.outputs: dict[str, bytes] = {}

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/models/{owner}/{name}/predictions", self.create),
            web.post("/v1/predictions", self.create),
            web.get("/v1/predictions/{id}", self.get),
            web.post("/v1/predictions/{id}/cancel", self.cancel),
            web.get("/delivery/{id}/output.mp4", self.deliver),
        ]

    def _unauthenticated(self, request: web.Request) -> web.Response | None:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return problem(401, "Unauthenticated", "You did not pass a valid authentication token")
        return None

    async def create(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return problem(400, "Invalid JSON", "The request body is not valid JSON.")
        self.record(request, body, raw)
        if refused := self._unauthenticated(request):
            return refused
        if not isinstance(body, dict):
            return problem(422, "Invalid request", "The request body must be a JSON object.")
        allowed = {"input", "webhook", "webhook_events_filter", "stream"}
        if "owner" not in request.match_info:
            allowed.add("version")
        if extra := set(body) - allowed:
            return problem(422, "Invalid request", f"Additional property {sorted(extra)[0]} is not allowed")
        model = f"{request.match_info.get('owner')}/{request.match_info.get('name')}"
        if "owner" in request.match_info and model != MODEL:
            return problem(404, "Model not found", f"The requested model {model} could not be found.")
        if "owner" not in request.match_info and body.get("version") != VERSION:
            return problem(
                422,
                "Invalid version or not permitted",
                "The specified version does not exist (or perhaps you don't have permission to use it?)",
            )
        if found := invalid_fields(body.get("input")):
            detail = "".join(f"- {f['field']}: {f['description']}\n" for f in found)
            return problem(422, "Input validation failed", detail, invalid_fields=found)
        return web.json_response(self._new(request, body["input"]), status=201)

    def _new(self, request: web.Request, inputs: dict[str, Any]) -> dict[str, Any]:
        pid = secrets.token_hex(13)[:26]
        api = f"http://{request.headers['host']}/v1/predictions/{pid}"
        prediction = {
            "id": pid,
            "model": MODEL,
            "version": VERSION,
            "input": inputs,
            "logs": "",
            "output": None,
            "data_removed": False,
            "error": None,
            "status": "starting",
            "created_at": _now(),
            "urls": {"cancel": api + "/cancel", "get": api, "web": f"https://replicate.com/p/{pid}"},
        }
        self.predictions[pid] = prediction
        self.polls[pid] = 0
        return prediction

    async def get(self, request: web.Request) -> web.Response:
        self.record(request, None)
        if refused := self._unauthenticated(request):
            return refused
        pid = request.match_info["id"]
        if pid not in self.predictions:
            return problem(404, "Not found", "The requested resource could not be found.")
        self.polls[pid] += 1
        self._advance(request, self.predictions[pid], self.polls[pid])
        return web.json_response(self.predictions[pid])

    def _advance(self, request: web.Request, p: dict[str, Any], polls: int) -> None:
        if p["status"] in ("succeeded", "failed", "canceled"):
            return
        if polls < self.steps or "SLOW" in p["input"]["prompt"]:
            done = min(polls, self.steps - 1) * 100 // self.steps
            p.update(status="processing", started_at=p.get("started_at") or _now())
            p["logs"] += f"{done:3d}%|{'#' * (done // 10):<10}| {polls}/{self.steps} [00:0{polls}<00:00]\n"
            return
        p.update(completed_at=_now(), metrics={"predict_time": 12.5, "total_time": 13.1})
        if "FAIL" in p["input"]["prompt"]:
            p.update(status="failed", error=FAILURE)
            return
        self.outputs[p["id"]] = mp4(p["input"]["prompt"], self.video_size)
        p.update(status="succeeded", output=f"http://localhost:{self.port}/delivery/{p['id']}/output.mp4")

    async def cancel(self, request: web.Request) -> web.Response:
        self.record(request, None)
        if refused := self._unauthenticated(request):
            return refused
        pid = request.match_info["id"]
        if pid not in self.predictions:
            return problem(404, "Not found", "The requested resource could not be found.")
        p = self.predictions[pid]
        if p["status"] in ("starting", "processing"):
            p.update(status="canceled", completed_at=_now())
        return web.json_response(p)

    async def deliver(self, request: web.Request) -> web.Response:
        self.record(request, None)
        data = self.outputs.get(request.match_info["id"])
        if data is None:
            return web.Response(status=404, text="Not Found")
        return web.Response(body=data, content_type="video/mp4")
