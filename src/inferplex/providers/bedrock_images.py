"""Image models on AWS Bedrock through InvokeModel (`POST /model/{id}/invoke`, SigV4-signed as the Bedrock
adapter signs), a mixin of the Bedrock adapter: Amazon Nova Canvas and Titan Image Generator (generation and
variations), Stability's models (generation).

Translation in `translate/bedrock_images.py`. What these models do not do: `style`, `background`,
`moderation`, `output_compression` and `user` are dropped and named (a 400 with `drop_params: false`);
Amazon's models make up to 5 images a call and Stability's one, more are several calls; a stream is answered
from one call, without partial images; edits are not served (OpenAI's alpha mask is not Amazon's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from inferplex.capabilities import Support
from inferplex.families.images import (
    ImageCaps,
    ImageRequest,
    ImagesAnswer,
    ImageVariationRequest,
    cannot,
    merge_answers,
    plan_images,
)
from inferplex.gateway_request import GatewayRequest
from inferplex.providers import http
from inferplex.providers.base import CallInfo
from inferplex.providers.failures import ErrorMap, ProviderFailure
from inferplex.targets import Target
from inferplex.translate import bedrock_images as tr

D = Support.DROPPED
_COMMON = {"style": D, "background": D, "moderation": D, "output_compression": D, "user": D, "input_fidelity": D}
AMAZON = ImageCaps({**_COMMON, "output_format": D}, max_n=5)
STABILITY = ImageCaps({**_COMMON, "quality": D}, max_n=1)


class BedrockImages:
    if TYPE_CHECKING:  # the Bedrock adapter's
        import aiohttp

        errors: ErrorMap
        _session: aiohttp.ClientSession

        def _url(self, model_id: str, action: str) -> str: ...

        def _signed_headers(self, url: str, payload: bytes, accept: str) -> dict[str, str]: ...

    async def generate_image(
        self, request: GatewayRequest[ImageRequest], target: Target, info: CallInfo
    ) -> ImagesAnswer:
        model_id = target.upstream_model
        plan = plan_images(request, STABILITY if tr.is_stability(model_id) else AMAZON, target, info)
        body = plan.request.body
        fmt = body.output_format if tr.is_stability(model_id) else "png"
        return await self._invoke(target, info, plan.counts, lambda n: tr.text_image(body, model_id, n), body.size, fmt)

    async def vary_image(
        self, request: GatewayRequest[ImageVariationRequest], target: Target, info: CallInfo
    ) -> ImagesAnswer:
        if tr.is_stability(target.upstream_model):
            raise cannot(target, "make image variations")
        plan = plan_images(request, AMAZON, target, info)
        body = plan.request.body
        return await self._invoke(target, info, plan.counts, lambda n: tr.variation(body, n), body.size, "png")

    async def _invoke(
        self,
        target: Target,
        info: CallInfo,
        counts: tuple[int, ...],
        build: Callable[[int], dict[str, Any]],
        size: str | None,
        fmt: str | None,
    ) -> ImagesAnswer:
        url = self._url(target.upstream_model, "invoke")

        async def one(n: int) -> ImagesAnswer:
            payload = build(n)
            headers = self._signed_headers(url, orjson.dumps(payload), "application/json")
            data, _ = await http.post_json_within(
                target, info.timeouts, self._session, url, payload, headers, self.errors
            )
            return tr.to_answer(data, size, fmt)

        try:
            answers: list[Any] = await asyncio.gather(*(one(n) for n in counts))
        except ProviderFailure as failure:
            raise self.errors.failure(failure) from failure
        return merge_answers(answers)
