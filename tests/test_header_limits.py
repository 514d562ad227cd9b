"""The request head's limits (http_server.py, docs/limits.md), over raw sockets: the request line (414), each
header and the whole head (431), each refusal a JSON error in the path's dialect that the client can read
(a lingering close, not a reset), and ordinary requests, with large but allowed heads, served as before."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI
from tests.gateway_server import GatewayServer

KIB = 1024
BODY = orjson.dumps({"model": "echo-model", "messages": [{"role": "user", "content": "Say hi"}]})


def head(gw: GatewayServer, extra: list[tuple[str, str]], path: str = "/v1/models", method: str = "GET") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: gw", f"Authorization: Bearer {gw.master_key}"]
    lines += [f"{name}: {value}" for name, value in extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chat(gw: GatewayServer, extra: list[tuple[str, str]]) -> bytes:
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(BODY))), *extra]
    return head(gw, headers, "/v1/chat/completions", "POST") + BODY


def read_response(s: socket.socket, data: bytes = b"") -> tuple[int, dict[str, str], bytes, bytes]:
    """One whole response from `s`: status, headers, body, and what followed it."""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, f"the connection closed before a response: {data!r}"
        data += chunk
    raw, _, rest = data.partition(b"\r\n\r\n")
    lines = raw.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    n = int(headers["content-length"])
    while len(rest) < n:
        chunk = s.recv(65536)
        assert chunk, "the connection closed inside a response body"
        rest += chunk
    return int(lines[0].split()[1]), headers, rest[:n], rest[n:]


def exchange(gw: GatewayServer, request: bytes) -> tuple[int, dict[str, str], Any]:
    """Send all of `request` (the gateway must read it: a large head is refused only after it arrived), then
    read one response; a reset instead of a response fails the test."""
    with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
        s.sendall(request)
        status, headers, body, _ = read_response(s)
    return status, headers, orjson.loads(body)


def assert_refused(status: int, headers: dict[str, str], body: Any, expected: int, code: str) -> None:
    assert status == expected, body
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code and body["error"]["type"] == "invalid_request_error"


def test_an_8_mib_header_gets_a_readable_431_not_a_reset(gateway: GatewayServer) -> None:
    request = head(gateway, [("X-Big", "a" * (8 * KIB * KIB))])
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        s.sendall(request)  # completes: the gateway reads and drops what it refused
        status, headers, raw, rest = read_response(s)
        while chunk := s.recv(65536):  # then the gateway ends the connection, cleanly
            rest += chunk
    assert_refused(status, headers, orjson.loads(raw), 431, "request_header_too_large")
    assert rest == b""


def test_many_headers_past_the_whole_head_limit(gateway: GatewayServer) -> None:
    extra = [(f"X-Part-{i}", "b" * (6 * KIB)) for i in range(6)]  # each under 8 KiB, 36 KiB in all
    assert_refused(*exchange(gateway, head(gateway, extra)), 431, "request_header_too_large")


def test_one_header_past_the_line_limit(gateway: GatewayServer) -> None:
    status, headers, body = exchange(gateway, head(gateway, [("X-Long", "c" * (9 * KIB)), ("X-After", "1")]))
    assert_refused(status, headers, body, 431, "request_header_too_large")
    assert "'X-Long'" in body["error"]["message"]


def test_a_request_line_past_its_limit_is_414(gateway: GatewayServer) -> None:
    status, headers, body = exchange(gateway, head(gateway, [], path="/v1/models?q=" + "d" * (9 * KIB)))
    assert_refused(status, headers, body, 414, "request_line_too_long")


def test_a_refusal_speaks_the_dialect_of_its_path(gateway: GatewayServer) -> None:
    extra = [("X-Long", "e" * (9 * KIB)), ("X-After", "1")]
    status, _, body = exchange(gateway, head(gateway, extra, "/v1/messages", "POST"))
    assert status == 431 and body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    status, _, body = exchange(gateway, head(gateway, extra, "/v1/ula/chat/completions", "POST"))
    assert status == 431 and body["api_details"]["api_status"] == "error"
    assert body["error"]["code"] == "request_header_too_large"


def test_large_allowed_heads_are_served_and_keep_the_connection(gateway: GatewayServer) -> None:
    # 30 KiB of headers, just under the whole-head limit, arriving with the body in one write, twice on
    # one connection: the body that follows the head must not count towards it.
    extra = [(f"X-Part-{i}", "f" * (6 * KIB)) for i in range(5)]
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        s.sendall(chat(gateway, extra))
        status, _, body, rest = read_response(s)
        assert status == 200 and orjson.loads(body)["choices"][0]["message"]["content"] == "echo: Say hi"
        s.sendall(chat(gateway, extra) + chat(gateway, []))  # and pipelined after it
        for _ in range(2):
            status, _, body, rest = read_response(s, rest)
            assert status == 200, body


@pytest.fixture(scope="module")
def small_limits(fake_openai: FakeOpenAI) -> Iterator[GatewayServer]:
    limits = {"max_request_line_bytes": 512, "max_header_bytes": 1024, "max_head_bytes": 4096}
    with GatewayServer(openai_config(fake_openai, **limits, lingering_close_s=1)) as server:
        yield server


def test_the_limits_are_configurable(small_limits: GatewayServer) -> None:
    gw = small_limits
    assert exchange(gw, head(gw, [("X-Fits", "g" * 900)]))[0] == 200
    assert exchange(gw, head(gw, [("X-Long", "g" * 1100), ("X-After", "1")]))[0] == 431
    assert exchange(gw, head(gw, [(f"X-{i}", "g" * 900) for i in range(5)]))[0] == 431
    assert exchange(gw, head(gw, [], path="/v1/models?q=" + "g" * 600))[0] == 414
