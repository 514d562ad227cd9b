"""From a parsed request to a dialect's answer: the one road every dialect's routes take.

A route parses its wire format into a `GatewayRequest` of a family; what follows is the same everywhere:
the pipeline serves it, and the dialect's `Rendering` for that family (`Dialect.renders`) shapes the answer,
so no dialect calls the pipeline its own way and a new family's route is a parse and one call here.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from inferplex.canonical import ChatRequest
from inferplex.context import Context
from inferplex.dialects.registry import Dialect
from inferplex.families.base import Family
from inferplex.families.chat import CHAT
from inferplex.gateway_request import GatewayRequest
from inferplex.services import Services


async def answer_chat(
    dialect: Dialect, services: Services, request: GatewayRequest[ChatRequest], ctx: Context
) -> Response:
    """A chat request, buffered or streamed as it asked, in `dialect`'s shape."""
    rendering = dialect.renders[CHAT.name]
    if request.body.stream:
        if rendering.stream is None:
            raise TypeError(f"the {dialect.name} dialect renders no chat stream")
        return rendering.stream(await services.pipeline.chat_stream(request, ctx), request, ctx)
    return rendering.result(await services.pipeline.chat(request, ctx), request, ctx)


async def answer(
    dialect: Dialect, family: Family[Any, Any, Any], services: Services, request: GatewayRequest[Any], ctx: Context
) -> Response:
    """A request of a family on the pipeline's generic path (`Pipeline.run`), in `dialect`'s shape."""
    return dialect.renders[family.name].result(await services.pipeline.run(family, ctx, request), request, ctx)
