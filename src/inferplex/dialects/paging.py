"""OpenAI's cursor pages (files, batches, videos, a response's input items): the query's `limit` and `order`,
checked once with the same 400s everywhere, and the page's body."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request

from inferplex.errors import InvalidRequest


def limit_of(request: Request, default: int, maximum: int, minimum: int = 1) -> int:
    """The query's `limit`, from `minimum` to `maximum` (a 400 naming it otherwise)."""
    raw = request.query_params.get("limit", str(default))
    if not raw.isdigit() or not minimum <= int(raw) <= maximum:
        raise InvalidRequest(f"Invalid 'limit': an integer from {minimum} to {maximum}.", param="limit")
    return int(raw)


def order_of(request: Request) -> str:
    """The query's `order`: `asc` or `desc` (the default, as OpenAI's lists)."""
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("Invalid 'order': 'asc' or 'desc'.", param="order")
    return order


def list_page(data: list[Any], more: bool) -> Any:
    """The page's body: its first and last ids and whether more follow. Typed `Any` so each route returns it
    as its own list TypedDict."""
    return {
        "object": "list",
        "data": data,
        "first_id": data[0].get("id") if data else None,
        "last_id": data[-1].get("id") if data else None,
        "has_more": more,
    }
