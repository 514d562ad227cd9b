"""`pii_guard` (Inferada's name): refuse a prompt that contains personal data, a policy rather than a redaction.

It uses `pii_redact`'s detectors (pii_detect.py) on every message the upstream would receive, since each of
them reaches the model, and refuses with a 422 naming the kinds found (never the values) before anything is
sent or charged. Credentials are `secret_scan`'s business and are not personal data, so they are not looked
for unless `kinds` names them. Options: `kinds` (a subset of the detector kinds) and `region` (the default
country of phone numbers written without `+`; otherwise the request's language decides, as for `anonymise`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from inferplex.canonical import ChatRequest
from inferplex.errors import InvalidRequest, ProcessorRejected
from inferplex.gateway_request import GatewayRequest
from inferplex.processors.base import Env, Exchange, Step, check_options
from inferplex.processors.pii import REGIONS, kinds_option
from inferplex.processors.pii_detect import ALL_KINDS, find_pii
from inferplex.processors.text import texts

PERSONAL = ALL_KINDS - {"CREDENTIAL"}


class PiiGuard(Step):
    name = "pii_guard"
    order = 35  # before any redaction, which would hide what it looks for

    def __init__(self, kinds: frozenset[str], region: str | None) -> None:
        super().__init__()
        self.kinds = kinds
        self.region = region

    def _region(self, ex: Exchange) -> str:
        if self.region is not None:
            return self.region
        primary, _, country = (ex.language or "en").replace("_", "-").partition("-")
        return country.upper() if len(country) == 2 else REGIONS.get(primary, "US")

    async def pre(self, ex: Exchange, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]:
        region = self._region(ex)
        found: Counter[str] = Counter()
        for text in texts(request.body):
            found.update(s.kind for s in find_pii(text, self.kinds, region))
        self.metadata.update(found=sum(found.values()), entities=dict(sorted(found.items())))
        if found:
            self.metadata["decision"] = "rejected"
            raise ProcessorRejected(
                f"Processor `pii_guard` rejected the request: the prompt contains personal data "
                f"({', '.join(sorted(found))}).",
                param="messages",
            )
        self.metadata["decision"] = "accepted"
        return request


def create(options: Mapping[str, Any], env: Env) -> PiiGuard:
    check_options("pii_guard", options, {"kinds", "region"})
    kinds = kinds_option(options, "pii_guard", PERSONAL)
    region = options.get("region")
    if region is not None and (not isinstance(region, str) or len(region) != 2):
        raise InvalidRequest(
            "Processor `pii_guard`: `region` must be a two-letter country code.",
            param="processors",
            code="invalid_processor_options",
        )
    return PiiGuard(kinds, region.upper() if region else None)
