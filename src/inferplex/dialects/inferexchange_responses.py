"""What the InferExchange dialect answers where it is not OpenAI's shape (see `inferexchange.py`), as TypedDicts.

Described for `/openapi.json` and for the tests that validate real answers; the routes build plain dicts.
"""

from __future__ import annotations

from typing import Literal

from typing_extensions import TypeAliasType, TypedDict

from inferplex.dialects.openai_responses import OpenAIError


class InferExchangeErrorDetail(TypedDict):
    code: Literal["RATE_LIMITED", "MODEL_UNAVAILABLE", "SERVICE_UNAVAILABLE"]
    message: str


class InferExchangeStatusError(TypedDict):
    """A 429 (`RATE_LIMITED`, published) or a 503 (its two codes inferred): `{"error": {"code", "message"}}`."""

    error: InferExchangeErrorDetail


# Every other failure keeps OpenAI's object: InferExchange publishes no other error body, and its clients are
# OpenAI SDKs, which read that one.
InferExchangeError = TypeAliasType("InferExchangeError", InferExchangeStatusError | OpenAIError)


class InferExchangePricing(TypedDict):
    """USD per million tokens, as decimal strings (the unit is published, the string form inferred)."""

    prompt: str
    completion: str
    unit: Literal["per_million_tokens"]


class InferExchangeModel(TypedDict):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str
    pricing: InferExchangePricing


class InferExchangeModelList(TypedDict):
    object: Literal["list"]
    data: list[InferExchangeModel]
