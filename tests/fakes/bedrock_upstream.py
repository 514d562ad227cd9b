"""A fake Bedrock Runtime: Converse and ConverseStream behind real SigV4 verification.

Shapes follow the Bedrock Runtime API reference and botocore's service model (`bedrock-runtime`):
Converse bodies and responses, ConverseStream as `application/vnd.amazon.eventstream` frames (prelude,
CRC32s, `:event-type` / `:message-type` / `:exception-type` headers, JSON payloads), and errors as
`{"message": ...}` with `x-amzn-ErrorType`. The signature is recomputed with botocore from the secret key,
so an unsigned, mis-signed or wrongly-scoped request is a 403 as it would be on AWS. It also rejects
unknown fields, roles other than user/assistant, a first message that is not user, empty text blocks,
`toolChoice` on a Llama model, images given as anything but bytes, and toolResult blocks that do not answer
the toolUse blocks of the turn before them.

Behaviour by model id: `*tool*` calls the first tool (forced tool honoured; `*parallel*`: two); after a
toolResult answers `tool said: <text>`; `*think*` adds reasoning; `*cache*` reports cache reads/writes;
`*guardrail*` stops with guardrail_intervened; `*future*` an unknown block and stop reason;
`*throttle*` a 429 ThrottlingException; `*overloaded*` a 503 ServiceUnavailableException; `*slow*` a text delta every
50 ms for 30 s, noting when the client hangs up (`hangups`); `*midstream*`
an exception frame after some text; `*numbered*` answers `echo: <text> #<k>`, k counting the numbered
answers so far (tells parallel calls apart).
"""

from __future__ import annotations

import binascii
import itertools
import struct
from typing import Any

import orjson
from aiohttp import web
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.fakes.server import FakeServer, sample, words

TOP = {
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "guardrailConfig",
    "additionalModelRequestFields",
    "additionalModelResponseFieldPaths",
    "promptVariables",
    "requestMetadata",
    "performanceConfig",
}
INFERENCE = {"maxTokens", "temperature", "topP", "stopSequences"}
BLOCKS = {
    "text",
    "image",
    "document",
    "video",
    "toolUse",
    "toolResult",
    "guardContent",
    "cachePoint",
    "reasoningContent",
    "citationsContent",
}


def error(status: int, kind: str, message: str) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps({"message": message}),
        content_type="application/json",
        headers={"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"},
    )


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return struct.pack("!B", len(raw_name)) + raw_name + struct.pack("!BH", 7, len(raw_value)) + raw_value


def frame(event: str, payload: dict[str, Any], message_type: str = "event") -> bytes:
    """One AWS event-stream message (the binary framing botocore's EventStreamBuffer decodes)."""
    type_header = ":exception-type" if message_type == "exception" else ":event-type"
    headers = (
        _header(type_header, event)
        + _header(":content-type", "application/json")
        + _header(":message-type", message_type)
    )
    body = orjson.dumps(payload)
    total = 12 + len(headers) + len(body) + 4
    prelude = struct.pack("!II", total, len(headers))
    prelude += struct.pack("!I", binascii.crc32(prelude) & 0xFFFFFFFF)
    message = prelude + headers + body
    return message + struct.pack("!I", binascii.crc32(message) & 0xFFFFFFFF)


def validate(model: str, body: Any) -> str | None:
    if not isinstance(body, dict):
        return "Malformed input request"
    for key in body:
        if key not in TOP:
            return f"Malformed input request: #: extraneous key [{key}] is not permitted, please reformat your input"
    for key in body.get("inferenceConfig") or {}:
        if key not in INFERENCE:
            return f"Malformed input request: #/inferenceConfig: extraneous key [{key}] is not permitted"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "The messages field is required."
    for i, m in enumerate(messages):
        if m.get("role") not in ("user", "assistant"):
            return f"messages.{i}.role: Value must be one of user, assistant"
        if i == 0 and m["role"] != "user":
            return (
                "A conversation must start with a user message. Try again with a conversation that starts "
                "with a user message."
            )
        if i > 0 and messages[i - 1]["role"] == m["role"]:
            return (
                "A conversation must alternate between user and assistant roles. Make sure the conversation "
                "alternates between user and assistant roles and try again."
            )
        if err := _unanswered_tool_uses(messages, i):
            return err
        for block in m.get("content") or ():
            if not BLOCKS & set(block):
                return f"messages.{i}.content: unknown content block"
            if "text" in block and not block["text"]:
                return "The text field in the ContentBlock object is blank. Add text to the text field, and try again."
            if "image" in block and "bytes" not in block["image"].get("source", {}):
                return "The image source must be bytes or an S3 location."
    if (body.get("toolConfig") or {}).get("toolChoice") and ".meta." in f".{model}":
        return (
            "This model doesn't support the toolConfig.toolChoice.any field. Remove toolConfig.toolChoice.any "
            "and try again."
        )
    return None


def _unanswered_tool_uses(messages: list[dict[str, Any]], i: int) -> str | None:
    """Bedrock's 400 for toolResult blocks that do not answer the toolUse blocks of the turn before them."""
    results = [b["toolResult"].get("toolUseId") for b in messages[i].get("content") or () if "toolResult" in b]
    if not results:
        return None
    previous = messages[i - 1].get("content") or () if i else ()
    uses = [b["toolUse"].get("toolUseId") for b in previous if "toolUse" in b]
    if len(results) > len(uses):
        return (
            f"The number of toolResult blocks at messages.{i}.content exceeds the number of toolUse blocks of "
            "previous turn."
        )
    if sorted(results) != sorted(uses):
        return f"Expected toolResult blocks at messages.{i}.content for the following Ids: {', '.join(uses)}"
    return None


_numbered = itertools.count(1)


def answer(model: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
    last = body["messages"][-1]
    texts = " ".join(b["text"] for b in last["content"] if "text" in b)
    if "numbered" in model:
        texts += f" #{next(_numbered)}"
    results = [b["toolResult"] for b in last["content"] if "toolResult" in b]
    tools = [t["toolSpec"] for t in (body.get("toolConfig") or {}).get("tools") or () if "toolSpec" in t]
    choice = (body.get("toolConfig") or {}).get("toolChoice") or {}
    blocks: list[dict[str, Any]] = []
    stop = "end_turn"
    if "think" in model:
        blocks.append({"reasoningContent": {"reasoningText": {"text": "Pondering.", "signature": "sig-b"}}})
    if results:
        blocks.append({"text": "tool said: " + " ".join(c.get("text", "") for c in results[0]["content"])})
    elif tools and ("tool" in model or "any" in choice or "tool" in choice):
        picked = [t for t in tools if t["name"] == choice["tool"]["name"]] if "tool" in choice else tools
        for k, spec in enumerate(picked[: 2 if "parallel" in model else 1]):
            args = sample(spec["inputSchema"]["json"]) if "tool" in choice else {"city": "Paris"}
            blocks.append({"toolUse": {"toolUseId": f"tooluse_{k}", "name": spec["name"], "input": args}})
        stop = "tool_use"
    else:
        reply = ("echo: " + texts).split(" ")
        limit = (body.get("inferenceConfig") or {}).get("maxTokens", 1 << 30)
        if limit < len(reply):
            reply, stop = reply[:limit], "max_tokens"
        blocks.append({"text": " ".join(reply)})
    if "guardrail" in model:
        blocks, stop = [{"text": "Sorry, the model cannot answer this question."}], "guardrail_intervened"
    if "future" in model:
        blocks.append({"someNewBlock": {"x": 1}})
        stop = "a_new_stop_reason"
    prompt = sum(words(" ".join(b.get("text", "") for b in m["content"])) for m in body["messages"])
    output = sum(words(b.get("text", "x")) for b in blocks)
    usage = {"inputTokens": prompt, "outputTokens": output, "totalTokens": prompt + output}
    if "cache" in model:
        usage.update(cacheReadInputTokens=40, cacheWriteInputTokens=10, totalTokens=prompt + output + 50)
    return blocks, stop, usage


class FakeBedrock(FakeServer):
    def __init__(
        self, access_key: str = "AKIDFAKE", secret_key: str = "fake-secret", region: str = "us-east-1"
    ) -> None:
        super().__init__(name="bedrock")
        self.credentials = Credentials(access_key, secret_key)
        self.region = region
        self.api_key = "ABSKQmVkcm9ja0FQSUtleS1mYWtl"

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/model/{model}/converse", self.converse),
            web.post("/model/{model}/converse-stream", self.converse),
        ]

    def _signature_error(self, request: web.Request, raw: bytes) -> str | None:
        return sigv4_error(request, raw, self.credentials, self.region, self.api_key)

    async def converse(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = orjson.loads(raw)
        self.record(request, body, raw)
        if msg := self._signature_error(request, raw):
            return error(403, "UnrecognizedClientException" if "token" in msg else "InvalidSignatureException", msg)
        model = request.match_info["model"]
        if msg := validate(model, body):
            return error(400, "ValidationException", msg)
        if "throttle" in model:
            return error(429, "ThrottlingException", "Too many requests, please wait before trying again.")
        if "overloaded" in model:
            return error(503, "ServiceUnavailableException", "The service is unavailable. Try again later.")
        blocks, stop, usage = answer(model, body)
        if request.path.endswith("/converse"):
            data = {
                "output": {"message": {"role": "assistant", "content": blocks}},
                "stopReason": stop,
                "usage": usage,
                "metrics": {"latencyMs": 12},
            }
            return web.Response(body=orjson.dumps(data), content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "application/vnd.amazon.eventstream"})
        await resp.prepare(request)
        if "slow" in model:
            await resp.write(frame("messageStart", {"role": "assistant"}))
            tick = {"contentBlockIndex": 0, "delta": {"text": "tick "}}
            return await self.tick(resp, frame("contentBlockDelta", tick))
        out = [frame("messageStart", {"role": "assistant"})]
        for i, block in enumerate(blocks):
            if "toolUse" in block:
                use = block["toolUse"]
                out.append(
                    frame(
                        "contentBlockStart",
                        {
                            "contentBlockIndex": i,
                            "start": {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}},
                        },
                    )
                )
                text = orjson.dumps(use["input"]).decode()
                out += [
                    frame(
                        "contentBlockDelta", {"contentBlockIndex": i, "delta": {"toolUse": {"input": text[k : k + 4]}}}
                    )
                    for k in range(0, len(text), 4)
                ]
            elif "text" in block:
                for k, word in enumerate(block["text"].split(" ")):
                    piece = word if k == 0 else " " + word
                    out.append(frame("contentBlockDelta", {"contentBlockIndex": i, "delta": {"text": piece}}))
                if "midstream" in model:
                    out.append(frame("modelStreamErrorException", {"message": "Model stream failed."}, "exception"))
                    break
            elif "reasoningContent" in block:
                text = block["reasoningContent"]["reasoningText"]
                out.append(
                    frame(
                        "contentBlockDelta",
                        {"contentBlockIndex": i, "delta": {"reasoningContent": {"text": text["text"]}}},
                    )
                )
                out.append(
                    frame(
                        "contentBlockDelta",
                        {"contentBlockIndex": i, "delta": {"reasoningContent": {"signature": text["signature"]}}},
                    )
                )
            out.append(frame("contentBlockStop", {"contentBlockIndex": i}))
        if "midstream" not in model:
            out.append(frame("messageStop", {"stopReason": stop}))
            out.append(frame("metadata", {"usage": usage, "metrics": {"latencyMs": 12}}))
        data = b"".join(out)
        for k in range(0, len(data), 37):  # frames split across reads, as TCP does
            await resp.write(data[k : k + 37])
        return resp


def sigv4_error(request: web.Request, raw: bytes, credentials: Any, region: str, api_key: str) -> str | None:
    """Why Bedrock would refuse the request's authentication (its own message), or None: SigV4 recomputed by
    botocore from the secret key, for any method, or a Bedrock API key as a bearer token."""
    auth = request.headers.get("Authorization", "")
    if auth.startswith("Bearer "):  # a Bedrock API key
        return None if auth == "Bearer " + api_key else "Invalid API Key format: Must start with pre-defined prefix"
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "Missing Authentication Token"
    fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 ") :].split(","))
    scope = fields["Credential"].split("/")
    if scope[0] != credentials.access_key:
        return "The security token included in the request is invalid."
    if scope[2:4] != [region, "bedrock"]:
        return f"Credential should be scoped to a valid region and service 'bedrock', not {scope[2:4]}."
    headers = {h: request.headers[h] for h in fields["SignedHeaders"].split(";") if h != "host"}
    url = f"http://{request.headers['host']}{request.raw_path}"
    aws = AWSRequest(method=request.method, url=url, data=raw, headers=headers)
    aws.context["timestamp"] = request.headers["x-amz-date"]
    signer = SigV4Auth(credentials, "bedrock", region)
    if signer.signature(signer.string_to_sign(aws, signer.canonical_request(aws)), aws) != fields["Signature"]:
        return (
            "The request signature we calculated does not match the signature you provided. Check your AWS "
            "Secret Access Key and signing method."
        )
    return None
