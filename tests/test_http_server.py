"""The gateway's HTTP protocol (http_server.py): a response's head and body leave in one write, and nothing
held back is lost or reordered: not on keep-alive, not on pipelined requests, not when the connection closes."""

from __future__ import annotations

import asyncio
import socket

import orjson
import pytest

from inferplex.http_server import CoalescingTransport
from tests.gateway_server import GatewayServer


class Recording(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, bytes]] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.events.append(("write", bytes(data)))

    def close(self) -> None:
        self.closing = True
        self.events.append(("close", b""))

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"peername": ("127.0.0.1", 1)}.get(name, default)


async def _one_pass() -> None:
    await asyncio.sleep(0)


async def test_writes_of_one_pass_leave_as_one_write_after_it() -> None:
    inner = Recording()
    t = CoalescingTransport(inner, asyncio.get_running_loop())
    t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    t.write(b"{}")
    assert inner.events == []  # held until the loop's pass ends
    await _one_pass()
    assert inner.events == [("write", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")]


async def test_writes_of_later_passes_leave_in_order() -> None:
    inner = Recording()
    t = CoalescingTransport(inner, asyncio.get_running_loop())
    for chunk in (b"a", b"b", b"c"):
        t.write(chunk)
        await _one_pass()
    t.writelines([b"d", b"e"])
    await _one_pass()
    assert inner.events == [("write", b"a"), ("write", b"b"), ("write", b"c"), ("write", b"de")]


async def test_close_sends_what_is_held_first() -> None:
    inner = Recording()
    t = CoalescingTransport(inner, asyncio.get_running_loop())
    t.write(b"head")
    t.write(b"body")
    t.close()
    await _one_pass()  # the pass's own flush then finds nothing
    assert inner.events == [("write", b"headbody"), ("close", b"")]
    assert t.is_closing() and t.get_extra_info("peername") == ("127.0.0.1", 1)  # the transport's own


async def test_nothing_is_written_to_a_transport_closed_meanwhile() -> None:
    inner = Recording()
    t = CoalescingTransport(inner, asyncio.get_running_loop())
    t.write(b"late")
    inner.closing = True  # e.g. the caller hung up before the pass ended
    await _one_pass()
    assert inner.events == []


def _request(gateway: GatewayServer, body: bytes, close: bool = False) -> bytes:
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {gateway.master_key}\r\nContent-Length: {len(body)}\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    )
    return head.encode() + body


def _responses(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The whole responses (status, headers, body) at the start of `data`; a partial last one is left out."""
    out = []
    while b"\r\n\r\n" in data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        n = int(headers["content-length"])
        if len(rest) < n:
            break
        out.append((int(lines[0].split()[1]), headers, rest[:n]))
        data = rest[n:]
    return out


BODY = orjson.dumps({"model": "echo-model", "messages": [{"role": "user", "content": "Say hi"}]})


def test_a_closing_connection_gets_the_whole_answer_before_it_closes(gateway: GatewayServer) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        s.sendall(_request(gateway, BODY, close=True))
        data = b""
        while chunk := s.recv(65536):  # until the gateway closes
            data += chunk
    ((status, headers, body),) = _responses(data)
    assert status == 200 and headers["connection"] == "close"
    assert orjson.loads(body)["choices"][0]["message"]["content"] == "echo: Say hi"


def test_pipelined_requests_get_their_answers_whole_and_in_order(gateway: GatewayServer) -> None:
    bodies = [
        orjson.dumps({"model": "echo-model", "messages": [{"role": "user", "content": f"number {i}"}]})
        for i in range(3)
    ]
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        s.sendall(b"".join(_request(gateway, b) for b in bodies))
        data = b""
        while len(_responses(data)) < 3:
            chunk = s.recv(65536)
            assert chunk, "the gateway closed the connection early"
            data += chunk
    answers = [orjson.loads(body)["choices"][0]["message"]["content"] for _, _, body in _responses(data)]
    assert answers == ["echo: number 0", "echo: number 1", "echo: number 2"]


@pytest.mark.parametrize(
    ("path", "dialect"),
    [
        ("/v1/chat/completions", "openai"),
        ("/v1/messages", "anthropic"),
        ("/v1/ula/chat/completions", "oneinfer"),
        ("/v0/chat/completions", "openai"),
        ("/api/v1/chat/completions", "openai"),
    ],
)
def test_a_malformed_head_gets_a_json_400_in_the_paths_dialect(gateway: GatewayServer, path: str, dialect: str) -> None:
    """A NUL in a header value is refused by the HTTP parser, before any route: still the route's JSON error."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {gateway.master_key}\r\n"
        f"X-Bad: a\x00b\r\nContent-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as s:
        s.sendall(head.encode() + BODY)
        data = b""
        while chunk := s.recv(65536):  # the gateway closes after answering
            data += chunk
    ((status, headers, body),) = _responses(data)
    assert status == 400 and headers["content-type"] == "application/json"
    error = orjson.loads(body)
    if dialect == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    elif dialect == "oneinfer":
        assert error["api_details"]["api_status"] == "error" and error["error"]["code"] == "invalid_http_request"
    else:
        assert set(error["error"]) == {"message", "type", "param", "code"}
        assert error["error"]["code"] == "invalid_http_request"
