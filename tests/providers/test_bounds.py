"""Every upstream call is bounded, whichever adapter and whichever path makes it.

Two upstreams that never answer, both on 127.0.0.1:
- `Unaccepting`: a listening socket whose accept queue is full, so a new connection's SYN is dropped and its
  connect never completes: only the connect timeout can end it;
- `Silent`: a server that accepts the connection, reads the request and never answers: only the read (or
  total) bound can end it.
Each adapter kind is asked through the gateway, buffered and streamed, and so is `/v1/messages/count_tokens`
(which the router does not call): the caller must get a 504 in its dialect within the configured bound.
The providers' own bounds are 20 s, so only the bound under test (0.3 to 0.5 s) can end a call in time.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.gateway_server import GatewayServer

KINDS = ("openai", "azure", "anthropic", "gemini", "bedrock")
SLOW = 20.0  # the provider-level bounds a call must not wait for
WITHIN = 5.0  # how long a bounded call may take here, the bound (0.3 to 0.5 s) plus a slow machine's margin


class Unaccepting:
    """A listening socket that never accepts, its queue already full: connecting to it hangs."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(0)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        for _ in range(16):  # fill the accept queue until a connect no longer completes
            client = socket.socket()
            client.settimeout(0.3)
            try:
                client.connect(("127.0.0.1", self.port))
            except TimeoutError:
                client.close()
                return
            self.held.append(client)
        raise RuntimeError("the accept queue never filled")

    def close(self) -> None:
        for s in [*self.held, self.sock]:
            s.close()


class Silent:
    """Accepts every connection, reads what is sent, never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True, name="silent-upstream")
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        for s in [*self.conns, self.sock]:
            s.close()


def _provider(name: str, kind: str, port: int, timeouts: dict[str, float]) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    provider: dict[str, Any] = {"name": name, "kind": kind, "timeouts": timeouts, "api_key": "env:BOUNDS_KEY"}
    provider["base_url"] = {"openai": base + "/v1", "gemini": base + "/v1beta"}.get(kind, base)
    if kind == "bedrock":
        provider["options"] = {"region": "us-east-1"}
    return provider


@pytest.fixture(scope="module")
def gateway() -> Iterator[GatewayServer]:
    unaccepting, silent = Unaccepting(), Silent()
    mp = pytest.MonkeyPatch()
    mp.setenv("BOUNDS_KEY", "ABSKQmVkcm9ja0FQSUtleS1mYWtl")
    providers, models = [], []
    for kind in KINDS:
        # connect: the deployment's own connect timeout is the only short bound
        providers.append(_provider(f"c-{kind}", kind, unaccepting.port, {"connect": SLOW, "read": SLOW}))
        deployment = {"provider": f"c-{kind}", "model": "m", "timeouts": {"connect": 0.3}}
        models.append({"name": f"connect-{kind}", "deployments": [deployment]})
        # read: the provider's read timeout
        providers.append(_provider(f"r-{kind}", kind, silent.port, {"connect": SLOW, "read": 0.5}))
        models.append({"name": f"read-{kind}", "deployments": [{"provider": f"r-{kind}", "model": "m"}]})
    for kind in ("openai", "azure"):  # the adapters that serve embeddings
        deployment = {"provider": f"c-{kind}", "model": "m", "timeouts": {"connect": 0.3}}
        models.append({"name": f"embed-connect-{kind}", "type": "embedding", "deployments": [deployment]})
        models.append(
            {
                "name": f"embed-read-{kind}",
                "type": "embedding",
                "deployments": [{"provider": f"r-{kind}", "model": "m"}],
            }
        )
    # total: an attempt's whole time, below a longer read
    providers.append(_provider("t-anthropic", "anthropic", silent.port, {"connect": SLOW, "read": SLOW, "total": 0.5}))
    models.append({"name": "total-anthropic", "deployments": [{"provider": "t-anthropic", "model": "m"}]})
    config = {"providers": providers, "models": models}
    try:
        with GatewayServer(config) as server:
            yield server
    finally:
        mp.undo()
        unaccepting.close()
        silent.close()


def _timed(gateway: GatewayServer, path: str, body: dict[str, Any]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = httpx.post(gateway.url + path, json=body, headers=gateway.auth, timeout=SLOW * 2)
    return response, time.monotonic() - started


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
@pytest.mark.parametrize("bound", ["connect", "read"])
@pytest.mark.parametrize("kind", KINDS)
def test_chat_is_bounded(gateway: GatewayServer, kind: str, bound: str, stream: bool) -> None:
    body = {"model": f"{bound}-{kind}", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    response, took = _timed(gateway, "/v1/chat/completions", body)
    assert response.status_code == 504, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert took < WITHIN, f"{kind} answered after {took:.1f}s: {error['message']}"


@pytest.mark.parametrize("bound", ["connect", "read"])
@pytest.mark.parametrize("kind", ["openai", "azure"])
def test_embeddings_are_bounded(gateway: GatewayServer, kind: str, bound: str) -> None:
    response, took = _timed(gateway, "/v1/embeddings", {"model": f"embed-{bound}-{kind}", "input": "hi"})
    assert response.status_code == 504, response.text
    assert took < WITHIN, f"{kind} embeddings answered after {took:.1f}s"


@pytest.mark.parametrize("bound", ["connect", "read", "total"])
def test_count_tokens_is_bounded(gateway: GatewayServer, bound: str) -> None:
    body = {"model": f"{bound}-anthropic", "messages": [{"role": "user", "content": "hi"}]}
    response, took = _timed(gateway, "/v1/messages/count_tokens", body)
    assert response.status_code == 504, response.text
    assert response.json()["type"] == "error" and response.json()["error"]["type"] == "api_error"
    assert took < WITHIN, f"count_tokens answered after {took:.1f}s"


def test_messages_route_is_bounded_in_anthropic_shape(gateway: GatewayServer) -> None:
    body = {"model": "connect-gemini", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    response, took = _timed(gateway, "/v1/messages", body)
    assert response.status_code == 504 and response.json()["error"]["type"] == "api_error"
    assert took < WITHIN
