"""`secret_scan`: keep credentials (cloud keys, tokens, private keys, passwords) out of upstream prompts.

Option `action`: `block` (the default) refuses the request with a 422 naming the kinds found; `redact`
replaces each secret with a placeholder (`[AWS_ACCESS_KEY_1]`) and lets the request through. Secrets are
never put back into answers: a model has no business repeating them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from inferplex.canonical import ChatRequest
from inferplex.errors import ProcessorRejected
from inferplex.gateway_request import GatewayRequest
from inferplex.processors.base import Env, Exchange, Step, check_options, choice
from inferplex.processors.credentials import find_credentials, replace_spans, resolve_overlaps
from inferplex.processors.placeholders import Vault
from inferplex.processors.text import rewrite, texts


class SecretScan(Step):
    name = "secret_scan"
    order = 30

    def __init__(self, action: str) -> None:
        super().__init__()
        self.action = action
        self.vault = Vault()

    async def pre(self, ex: Exchange, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]:
        found: Counter[str] = Counter()
        for text in texts(request.body):
            found.update(s.kind for s in resolve_overlaps(find_credentials(text)))
        self.metadata.update(action=self.action, found=sum(found.values()), kinds=dict(sorted(found.items())))
        if not found:
            return request
        if self.action == "block":
            raise ProcessorRejected(
                f"Processor `secret_scan` rejected the request: it contains credentials ({', '.join(sorted(found))}).",
                param="messages",
            )

        def redact(text: str) -> str:
            return replace_spans(text, resolve_overlaps(find_credentials(text)), self.vault.placeholder)

        return rewrite(request, redact)


def create(options: Mapping[str, Any], env: Env) -> SecretScan:
    check_options("secret_scan", options, {"action"})
    return SecretScan(choice("secret_scan", options, "action", ("block", "redact")))
