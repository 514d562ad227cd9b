"""A fake Azure OpenAI resource: deployment URLs, `api-key`, `api-version`, and content-filter annotations.

Shapes follow Azure's REST reference for chat completions (2024-10-21): OpenAI's completion plus
`prompt_filter_results` and per-choice `content_filter_results`; streams open with a `choices: []` chunk that
carries the prompt's filter results. Errors: 401 `{"error": {"code": "401", "message": ...}}` for a bad
key, 404 `DeploymentNotFound`, 400 `content_filter` with `innererror` for a filtered prompt.
Deployments: any name echoes; `filtered` ends with finish_reason content_filter; `prompt-filtered` is the
400; `missing` does not exist; `error-<status>` answers that status (429 with `retry-after: 7`); `slow`
streams "tick " every 50 ms for 30 s, noting when the client hangs up (`hangups`); `midstream` streams some
text, then an error object; `choices` answers each of n choices with its own text (`... (choice i)`),
streamed interleaved under one id as Azure does.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from tests.fakes.server import FakeServer, words

SAFE = {k: {"filtered": False, "severity": "safe"} for k in ("hate", "self_harm", "sexual", "violence")}
PROMPT_FILTER = [{"prompt_index": 0, "content_filter_results": SAFE}]


def error(http_status: int, code: str, message: str, **extra: Any) -> web.Response:
    body = {"error": {"code": code, "message": message, **extra}}
    return web.Response(status=http_status, body=orjson.dumps(body), content_type="application/json")


class FakeAzure(FakeServer):
    def __init__(self, api_key: str = "az-fake") -> None:
        super().__init__(name="azure")
        self.api_key = api_key

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/openai/deployments/{deployment}/chat/completions", self.chat)]

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        self.record(request, body)
        if request.headers.get("api-key") != self.api_key:
            return error(
                401,
                "401",
                "Access denied due to invalid subscription key or wrong API endpoint. Make sure "
                "to provide a valid key for an active subscription and use a correct regional API endpoint "
                "for your resource.",
            )
        if "api-version" not in request.query:
            return error(404, "404", "Resource not found")
        deployment = request.match_info["deployment"]
        if deployment == "missing":
            return error(404, "DeploymentNotFound", "The API deployment for this resource does not exist.")
        if deployment.startswith("error-"):
            status = int(deployment.removeprefix("error-"))
            response = error(status, str(status), f"fake azure failure {status}")
            if status == 429:
                response.headers["retry-after"] = "7"
            return response
        if deployment == "prompt-filtered":
            inner = {
                "code": "ResponsibleAIPolicyViolation",
                "content_filter_result": {**SAFE, "violence": {"filtered": True, "severity": "high"}},
            }
            return error(
                400,
                "content_filter",
                "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
                param="prompt",
                status=400,
                innererror=inner,
            )
        last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
        text = "echo: " + (last["content"] if isinstance(last["content"], str) else "")
        finish = "stop"
        choice_filter: dict[str, Any] = SAFE
        if deployment == "filtered":
            text, finish = "echo:", "content_filter"
            choice_filter = {**SAFE, "violence": {"filtered": True, "severity": "medium"}}
        n = int(body.get("n") or 1)
        texts = [f"{text} (choice {i})" for i in range(n)] if deployment == "choices" else [text] * n
        out_words = sum(words(t) for t in texts)
        usage = {"prompt_tokens": words(text), "completion_tokens": out_words, "total_tokens": words(text) + out_words}
        base = {
            "id": "chatcmpl-az1",
            "created": 1735689600,
            "model": "gpt-4o-2024-08-06",
            "system_fingerprint": "fp_az",
        }
        if not body.get("stream"):
            data = {
                **base,
                "object": "chat.completion",
                "prompt_filter_results": PROMPT_FILTER,
                "usage": usage,
                "choices": [
                    {
                        "index": i,
                        "finish_reason": finish,
                        "logprobs": None,
                        "message": {"role": "assistant", "content": t, "refusal": None},
                        "content_filter_results": choice_filter,
                    }
                    for i, t in enumerate(texts)
                ],
            }
            return web.Response(body=orjson.dumps(data), content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if deployment == "slow":
            tick = {**base, "object": "chat.completion.chunk"}
            tick["choices"] = [{"index": 0, "delta": {"content": "tick "}, "finish_reason": None}]
            return await self.tick(resp, b"data: " + orjson.dumps(tick) + b"\n\n")
        chunks: list[dict[str, Any]] = [
            {"id": "", "object": "", "created": 0, "model": "", "choices": [], "prompt_filter_results": PROMPT_FILTER}
        ]
        chunk = {**base, "object": "chat.completion.chunk"}

        def one(i: int, delta: dict[str, Any], finish_reason: str | None, filters: dict[str, Any]) -> dict[str, Any]:
            choice = {"index": i, "delta": delta, "finish_reason": finish_reason, "content_filter_results": filters}
            return {**chunk, "choices": [choice]}

        chunks += [one(i, {"role": "assistant", "content": ""}, None, {}) for i in range(n)]
        split = [t.split(" ") for t in texts]
        for k in range(max(len(ws) for ws in split)):  # the choices take turns, as Azure interleaves them
            for i, ws in enumerate(split):
                if k < len(ws):
                    chunks.append(one(i, {"content": ws[k] if k == 0 else " " + ws[k]}, None, choice_filter))
        chunks += [one(i, {}, finish, choice_filter) for i in range(n)]
        if deployment == "midstream":  # some text, then the error object Azure sends inside a stream
            chunks = [*chunks[: 2 + n], {"error": {"code": "server_error", "message": "The server had an error."}}]
        elif (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**chunk, "choices": [], "usage": usage})
        for c in chunks:
            await resp.write(b"data: " + orjson.dumps(c) + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp
