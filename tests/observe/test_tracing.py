"""Traces through the real gateway: spans exported over OTLP/HTTP to an in-process collector.

A caller sends its own W3C `traceparent` with the official OpenAI SDK; the test reads the span tree the
collector received (the request span under the caller's span, the stages and each upstream attempt under
the request span), the GenAI attributes, and the `traceparent` the fake upstream received (its parent is
the attempt's span). Content stays off spans unless `capture_content` is on; with tracing off nothing is
exported and nothing goes upstream.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from inferplex.observe.tracing import TracingSink
from tests.conftest import UPSTREAM_KEY, openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer
from tests.observe.otlp_collector import Collector, Span

MSG: Any = [{"role": "user", "content": "hello tracing world"}]
STAGES = {"auth", "limits", "routing", "settle"}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    f = FakeOpenAI(UPSTREAM_KEY).start()
    yield f
    f.stop()


def traced_config(fake: FakeOpenAI, collector: Collector, **tracing: Any) -> dict[str, Any]:
    config = openai_config(fake)
    pricing = {"input": "0.15", "output": "0.60"}
    config["models"] += [
        {
            "name": "fallback-model",
            "deployments": [{"provider": "fake", "model": "error-500"}],
            "routing": {"retries": 0, "fallbacks": ["echo-model"], "backoff": 0.01},
            "pricing": pricing,
        },
        {
            "name": "broken",
            "deployments": [{"provider": "fake", "model": "error-500"}],
            "routing": {"retries": 0, "backoff": 0.01},
            "pricing": pricing,
        },
    ]
    settings = {"enabled": True, "endpoint": collector.endpoint, "export_interval_s": 0.05, **tracing}
    config["observability"] = {"tracing": settings}
    return config


@pytest.fixture(scope="module")
def gateway(fake: FakeOpenAI, collector: Collector) -> Iterator[GatewayServer]:
    with GatewayServer(traced_config(fake, collector)) as gw:
        yield gw


@pytest.fixture(scope="module")
def capturing(fake: FakeOpenAI, collector: Collector) -> Iterator[GatewayServer]:
    """Content capture on, its own service name, and a collector header given by reference."""
    mp = pytest.MonkeyPatch()
    mp.setenv("IPX_TEST_COLLECTOR_TOKEN", "t0ken")
    headers = {"x-collector-token": "env:IPX_TEST_COLLECTOR_TOKEN", "x-tenant": "ipx"}
    config = traced_config(fake, collector, capture_content=True, service_name="ipx-capture", headers=headers)
    with GatewayServer(config) as gw:
        yield gw
    mp.undo()


def client(gw: GatewayServer, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key=key or gw.master_key, max_retries=0)


def caller_context() -> tuple[str, str, dict[str, str]]:
    """A caller's trace id, span id and the headers that carry them (sampled), with a tracestate."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, {"traceparent": f"00-{trace_id}-{span_id}-01", "tracestate": "caller=abc"}


def request_span(spans: list[Span], request_id: str) -> Span | None:
    return next((s for s in spans if s.attributes.get("inferplex.request_id") == request_id), None)


def tree(
    collector: Collector, request_id: str, attempts: int = 1, stages: set[str] = STAGES
) -> tuple[Span, list[Span], list[Span]]:
    """(the request's span, its attempt spans in start order, its stage spans), once all have arrived."""

    def complete(spans: list[Span]) -> bool:
        root = request_span(spans, request_id)
        if root is None:
            return False
        children = [s for s in spans if s.parent_id == root.span_id]
        names = {s.name for s in children if s.kind == "internal"}
        return len([s for s in children if s.kind == "client"]) >= attempts and stages <= names

    spans = collector.wait_for(complete)
    root = request_span(spans, request_id)
    assert root is not None
    children = [s for s in spans if s.parent_id == root.span_id]
    clients = sorted((s for s in children if s.kind == "client"), key=lambda s: s.start_ns)
    return root, clients, [s for s in children if s.kind == "internal"]


def header(headers: dict[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name), None)


def upstream_traceparents(fake: FakeOpenAI, since: int) -> list[str | None]:
    """The `traceparent` of each request the upstream received since then, its flags reduced to `sampled`
    (a trace the gateway starts also sets W3C level 2's `random` flag)."""
    found = [header(r.headers, "traceparent") for r in fake.state.requests[since:]]
    return [None if t is None else f"{t[:-2]}{int(t[-2:], 16) & 1:02x}" for t in found]


def test_a_request_is_a_server_span_under_the_callers_with_stages_and_an_attempt(
    gateway: GatewayServer, collector: Collector, fake: FakeOpenAI
) -> None:
    trace_id, caller_span, headers = caller_context()
    before = len(fake.state.requests)
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="echo-model", messages=MSG, extra_headers=headers
    )
    answer = raw.parse()
    request_id = raw.headers["x-inferplex-request-id"]

    root, attempts, stages = tree(collector, request_id)
    assert (root.trace_id, root.parent_id, root.kind) == (trace_id, caller_span, "server")
    assert root.name == "chat echo-model"
    assert root.resource["service.name"] == "inferplex"
    a = root.attributes
    assert a["http.request.method"] == "POST" and a["http.route"] == "/v1/chat/completions"
    assert a["http.response.status_code"] == 200
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.request.model"] == "echo-model" and a["gen_ai.response.model"] == answer.model
    assert answer.usage is not None
    assert a["gen_ai.usage.input_tokens"] == answer.usage.prompt_tokens
    assert a["gen_ai.usage.output_tokens"] == answer.usage.completion_tokens
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert a["inferplex.cost_micros"] == int(raw.headers["x-inferplex-cost-micros"])
    assert a["inferplex.key_id"] == "master" and a["inferplex.deployment"] == "fake/gpt-echo"
    assert "error.type" not in a and root.status == "unset"

    # the stages, each inside the request's span
    assert STAGES <= {s.name for s in stages}
    for s in stages:
        assert root.start_ns <= s.start_ns <= s.end_ns <= root.end_ns

    # one attempt: a client span, and the upstream saw it as its parent (with the caller's tracestate)
    (attempt,) = attempts
    assert attempt.name == "chat gpt-echo" and attempt.trace_id == trace_id
    assert attempt.attributes["gen_ai.request.model"] == "gpt-echo"
    assert attempt.attributes["inferplex.deployment"] == "fake/gpt-echo"
    assert attempt.attributes["inferplex.attempt.outcome"] == "ok"
    assert attempt.attributes["http.response.status_code"] == 200
    assert (
        attempt.attributes["gen_ai.provider.name"] == "openai" and attempt.attributes["server.address"] == "127.0.0.1"
    )
    assert upstream_traceparents(fake, before) == [f"00-{trace_id}-{attempt.span_id}-01"]
    assert header(fake.state.requests[-1].headers, "tracestate") == "caller=abc"

    # content is off by default
    for span in (root, attempt):
        assert "gen_ai.input.messages" not in span.attributes and "gen_ai.output.messages" not in span.attributes


def test_a_stream_is_traced_until_its_last_chunk(
    gateway: GatewayServer, collector: Collector, fake: FakeOpenAI
) -> None:
    trace_id, caller_span, headers = caller_context()
    before = len(fake.state.requests)
    with client(gateway).chat.completions.with_streaming_response.create(
        model="echo-model",
        messages=MSG,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=headers,
    ) as resp:
        request_id = resp.headers["x-inferplex-request-id"]
        chunks = list(resp.parse())
    usage = chunks[-1].usage
    assert usage is not None

    root, (attempt,), _ = tree(collector, request_id)
    assert root.parent_id == caller_span and root.attributes["inferplex.stream"] is True
    assert root.attributes["gen_ai.usage.output_tokens"] == usage.completion_tokens
    assert root.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert attempt.attributes["inferplex.attempt.outcome"] == "ok"
    assert root.start_ns <= attempt.start_ns <= attempt.end_ns <= root.end_ns
    assert upstream_traceparents(fake, before) == [f"00-{trace_id}-{attempt.span_id}-01"]


def test_a_fallback_is_two_attempt_spans_each_the_parent_of_its_upstream_call(
    gateway: GatewayServer, collector: Collector, fake: FakeOpenAI
) -> None:
    trace_id, _, headers = caller_context()
    before = len(fake.state.requests)
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="fallback-model", messages=MSG, extra_headers=headers
    )
    assert raw.headers["x-inferplex-attempts"] == "2"

    root, attempts, _ = tree(collector, raw.headers["x-inferplex-request-id"], attempts=2)
    failed, served = attempts
    assert [s.attributes["inferplex.deployment"] for s in attempts] == ["fake/error-500", "fake/gpt-echo"]
    assert failed.status == "error" and failed.attributes["inferplex.attempt.outcome"] == "error"
    assert failed.attributes["error.type"].startswith("provider.")
    assert served.status == "unset" and served.attributes["inferplex.attempt.outcome"] == "ok"
    assert root.name == "chat fallback-model" and root.attributes["inferplex.attempts"] == 2
    assert root.attributes["gen_ai.request.model"] == "fallback-model"
    assert root.attributes["gen_ai.response.model"] == raw.parse().model
    assert upstream_traceparents(fake, before) == [f"00-{trace_id}-{s.span_id}-01" for s in attempts]


def test_failures_carry_their_closed_error_type(gateway: GatewayServer, collector: Collector) -> None:
    # refused before anyone is known: no key id, the caller's fault (not a span error)
    r = httpx.post(
        gateway.base_url + "/chat/completions",
        headers={"Authorization": "Bearer not-a-key"},
        json={"model": "echo-model", "messages": MSG},
    )
    assert r.status_code == 401
    root, _, _ = tree(collector, r.headers["x-inferplex-request-id"], attempts=0, stages=set())
    assert root.name == "POST /v1/chat/completions" and root.parent_id == ""
    assert root.attributes["error.type"] == "policy.unauthenticated"
    assert root.attributes["http.response.status_code"] == 401
    assert "inferplex.key_id" not in root.attributes and root.status == "unset"

    # every deployment failed: the provider's fault, an error span
    with pytest.raises(openai.APIStatusError) as failed:
        client(gateway).chat.completions.create(model="broken", messages=MSG)
    request_id = failed.value.response.headers["x-inferplex-request-id"]
    root, (attempt,), _ = tree(collector, request_id, stages={"auth", "limits", "routing"})
    assert root.attributes["error.type"] == "provider.upstream_error" and root.status == "error"
    assert root.attributes["http.response.status_code"] == failed.value.status_code
    assert attempt.status == "error"


def test_without_a_caller_context_the_request_starts_a_trace(
    gateway: GatewayServer, collector: Collector, fake: FakeOpenAI
) -> None:
    before = len(fake.state.requests)
    raw = client(gateway).embeddings.with_raw_response.create(model="embed-model", input="a few words")
    root, (attempt,), _ = tree(collector, raw.headers["x-inferplex-request-id"])
    assert root.parent_id == "" and root.name == "embeddings embed-model"
    assert root.attributes["gen_ai.operation.name"] == "embeddings"
    assert attempt.name == "embeddings text-embedding-fake"
    assert upstream_traceparents(fake, before) == [f"00-{root.trace_id}-{attempt.span_id}-01"]


def test_a_malformed_traceparent_is_ignored(gateway: GatewayServer, collector: Collector, fake: FakeOpenAI) -> None:
    before = len(fake.state.requests)
    raw = client(gateway).chat.completions.with_raw_response.create(
        model="echo-model", messages=MSG, extra_headers={"traceparent": "00-not-a-trace-01", "tracestate": "=,="}
    )
    root, (attempt,), _ = tree(collector, raw.headers["x-inferplex-request-id"])
    assert root.parent_id == "" and root.attributes["http.response.status_code"] == 200
    assert upstream_traceparents(fake, before) == [f"00-{root.trace_id}-{attempt.span_id}-01"]


def test_a_caller_that_does_not_sample_is_followed_upstream(gateway: GatewayServer, fake: FakeOpenAI) -> None:
    trace_id, caller_span, _ = caller_context()
    before = len(fake.state.requests)
    client(gateway).chat.completions.create(
        model="echo-model", messages=MSG, extra_headers={"traceparent": f"00-{trace_id}-{caller_span}-00"}
    )
    (sent,) = upstream_traceparents(fake, before)
    assert sent is not None
    version, sent_trace, sent_parent, flags = sent.split("-")
    assert (version, sent_trace, flags) == ("00", trace_id, "00") and sent_parent != caller_span


def test_content_is_captured_only_when_turned_on(
    capturing: GatewayServer, collector: Collector, fake: FakeOpenAI
) -> None:
    raw = client(capturing).chat.completions.with_raw_response.create(model="echo-model", messages=MSG)
    text = raw.parse().choices[0].message.content
    root, (attempt,), _ = tree(collector, raw.headers["x-inferplex-request-id"])
    assert root.resource["service.name"] == "ipx-capture"
    sent_with = [h for h in collector.headers if h.get("x-tenant") == "ipx"]
    assert sent_with and all(h["x-collector-token"] == "t0ken" for h in sent_with)
    assert all(h["content-type"] == "application/x-protobuf" for h in collector.headers)
    sent = [{"role": "user", "parts": [{"type": "text", "content": "hello tracing world"}]}]
    assert json.loads(root.attributes["gen_ai.input.messages"]) == sent
    assert json.loads(attempt.attributes["gen_ai.input.messages"]) == sent
    output = json.loads(root.attributes["gen_ai.output.messages"])
    assert output == [{"role": "assistant", "parts": [{"type": "text", "content": text}], "finish_reason": "stop"}]

    # a stream's text, as the caller received it
    with client(capturing).chat.completions.with_streaming_response.create(
        model="echo-model", messages=MSG, stream=True
    ) as resp:
        request_id = resp.headers["x-inferplex-request-id"]
        streamed = "".join(c.choices[0].delta.content or "" for c in resp.parse() if c.choices)
    root, (attempt,), _ = tree(collector, request_id)
    output = json.loads(root.attributes["gen_ai.output.messages"])
    assert output == [{"role": "assistant", "parts": [{"type": "text", "content": streamed}], "finish_reason": "stop"}]
    assert json.loads(attempt.attributes["gen_ai.output.messages"]) == output


def test_with_tracing_off_nothing_is_exported_and_nothing_goes_upstream(fake: FakeOpenAI, collector: Collector) -> None:
    config = traced_config(fake, collector, enabled=False)
    before = len(fake.state.requests)
    gw = GatewayServer(config)
    with gw:
        app: Any = gw.server.config.app
        assert app.state.hub.sink(TracingSink) is None
        _, _, headers = caller_context()
        raw = client(gw).chat.completions.with_raw_response.create(
            model="echo-model", messages=MSG, extra_headers=headers
        )
        request_id = raw.headers["x-inferplex-request-id"]
    # the gateway has stopped: a tracer would have flushed every span by now
    assert upstream_traceparents(fake, before) == [None]
    assert header(fake.state.requests[-1].headers, "tracestate") is None
    assert request_span(collector.spans, request_id) is None


def test_a_request_the_sampler_leaves_out_records_nothing_and_still_joins_upstream(
    fake: FakeOpenAI, collector: Collector
) -> None:
    before = len(fake.state.requests)
    with GatewayServer(traced_config(fake, collector, sample_ratio=0)) as gw:
        left_out = client(gw).chat.completions.with_raw_response.create(model="echo-model", messages=MSG)
        trace_id, _, headers = caller_context()  # a caller that samples is followed all the same
        followed = client(gw).chat.completions.with_raw_response.create(
            model="echo-model", messages=MSG, extra_headers=headers
        )
    # the gateway has stopped, so its batch has been sent
    unsampled, sampled = upstream_traceparents(fake, before)
    assert unsampled is not None and unsampled.endswith("-00")
    assert sampled is not None and sampled.startswith(f"00-{trace_id}-") and sampled.endswith("-01")
    assert request_span(collector.spans, left_out.headers["x-inferplex-request-id"]) is None
    assert request_span(collector.spans, followed.headers["x-inferplex-request-id"]) is not None


def test_a_caller_who_hangs_up_mid_stream_ends_the_trace_as_disconnected(
    gateway: GatewayServer, collector: Collector
) -> None:
    body = {"model": "slow-stream", "messages": MSG, "stream": True}
    with httpx.stream("POST", gateway.base_url + "/chat/completions", headers=gateway.auth, json=body) as resp:
        request_id = resp.headers["x-inferplex-request-id"]
        next(resp.iter_lines())  # the first chunk, then the caller leaves
    root, (attempt,), _ = tree(collector, request_id, stages={"auth", "limits", "routing"})
    assert root.attributes["http.response.status_code"] == 499
    assert root.attributes["error.type"] == "caller.disconnected" and root.status == "unset"
    assert attempt.attributes["inferplex.attempt.outcome"] == "ok"  # it answered; the caller left after
    assert attempt.end_ns <= root.end_ns


def test_another_dialect_and_the_processors_stage(gateway: GatewayServer, collector: Collector) -> None:
    trace_id, caller_span, headers = caller_context()
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=gateway.master_key, max_retries=0)
    raw = claude.messages.with_raw_response.create(
        model="echo-model", max_tokens=64, messages=MSG, extra_headers=headers
    )
    root, (attempt,), _ = tree(collector, raw.headers["x-inferplex-request-id"])
    assert (root.trace_id, root.parent_id) == (trace_id, caller_span)
    assert root.attributes["http.route"] == "/v1/messages" and root.attributes["inferplex.dialect"] == "anthropic"
    assert root.name == "chat echo-model" and attempt.name == "chat gpt-echo"

    body = {"model": "echo-model", "messages": MSG, "processors": ["secret_scan"]}
    r = httpx.post(gateway.base_url + "/chat/completions", headers=gateway.auth, json=body)
    assert r.status_code == 200, r.text
    _, _, stages = tree(collector, r.headers["x-inferplex-request-id"], stages=STAGES | {"processors"})
    assert "processors" in {s.name for s in stages}
