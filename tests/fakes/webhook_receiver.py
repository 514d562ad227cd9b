"""A webhook receiver on a real socket that checks each delivery as a Standard Webhooks consumer does
(standardwebhooks.com, written here from the spec, not from the gateway's code): the signature over
`id.timestamp.body` with the shared secret, the timestamp within five minutes, and the id for deduplication.

It can be told to fail: `fail_first` answers 500 to that many tries of each message before taking it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.server import BackgroundServer

TOLERANCE_S = 300


@dataclass
class Delivery:
    headers: dict[str, str]
    raw: bytes
    status: int  # what the receiver answered
    verified: bool | None  # None: no secret to check against

    @property
    def body(self) -> Any:
        return json.loads(self.raw)

    @property
    def id(self) -> str:
        return self.headers.get("webhook-id", "")


def verify(secret: str, headers: dict[str, str], raw: bytes) -> bool:
    msg_id, stamp, signatures = (headers.get(h) for h in ("webhook-id", "webhook-timestamp", "webhook-signature"))
    if not (msg_id and stamp and signatures):
        return False
    if abs(time.time() - int(stamp)) > TOLERANCE_S:
        return False
    key = base64.b64decode(secret.removeprefix("whsec_")) if secret.startswith("whsec_") else secret.encode()
    expected = base64.b64encode(hmac.new(key, f"{msg_id}.{stamp}.".encode() + raw, hashlib.sha256).digest())
    for sig in signatures.split():
        version, _, value = sig.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected):
            return True
    return False


@dataclass
class WebhookReceiver:
    secret: str | None = None
    fail_first: int = 0
    deliveries: list[Delivery] = field(default_factory=list)
    port: int = 0
    _server: BackgroundServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> WebhookReceiver:
        self._server = BackgroundServer([web.post("/hook", self._hook)], "webhooks")
        self.port = self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    async def _hook(self, request: web.Request) -> web.Response:
        raw = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        verified = None if self.secret is None else verify(self.secret, headers, raw)
        with self._lock:
            tries = sum(1 for d in self.deliveries if d.headers.get("webhook-id") == headers.get("webhook-id"))
            status = 500 if tries < self.fail_first else (401 if verified is False else 204)
            self.deliveries.append(Delivery(headers, raw, status, verified))
        return web.Response(status=status)

    def taken(self) -> list[Delivery]:
        """The deliveries it accepted, each message once (a receiver dedupes on `webhook-id`)."""
        with self._lock:
            seen: dict[str, Delivery] = {}
            for d in self.deliveries:
                if d.status < 300:
                    seen.setdefault(d.id, d)
            return list(seen.values())

    def events(self, type_: str) -> list[dict[str, Any]]:
        return [d.body for d in self.taken() if d.body.get("type") == type_]

    def wait_for(self, check: Any, timeout: float = 30.0) -> Any:
        """Wait until `check()` is truthy (the receiver's view at that moment), or fail."""
        deadline = time.monotonic() + timeout
        while True:
            found = check()
            if found:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"not delivered in time; received: {[d.raw for d in self.deliveries]}")
            time.sleep(0.02)
