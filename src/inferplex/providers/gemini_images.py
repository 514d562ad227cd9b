"""Google's image models through the Gemini API, a mixin of the Gemini adapter.

- Imagen (`imagen-*`): `POST {base}/models/{model}:predict`. It has no `quality`, `style`, `background`,
  `moderation` or `user`: those are dropped and named (a 400 with `drop_params: false`). More than 4 images
  take several calls. It has no edits (a 400).
- Gemini's own image models (e.g. `gemini-2.5-flash-image`): `generateContent` with
  `responseModalities: ["IMAGE"]`. One image per call, so `n` takes several calls. Edits send the images as
  inline data. `mask` is dropped as well (Gemini edits from the prompt). The answer's token usage is billed at
  the image rates.

Translation is in `translate/gemini_images.py`. A stream is answered from one call without partial images.
Variations are not served (a 400 naming the operation).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from inferplex.capabilities import Support
from inferplex.families.images import (
    ImageCaps,
    ImageEditRequest,
    ImageRequest,
    ImagesAnswer,
    cannot,
    merge_answers,
    plan_images,
)
from inferplex.gateway_request import GatewayRequest
from inferplex.providers import http
from inferplex.providers.base import CallInfo
from inferplex.providers.failures import ErrorMap, ProviderFailure
from inferplex.targets import Target
from inferplex.translate import gemini_images as tr

D = Support.DROPPED
_COMMON = {"quality": D, "style": D, "background": D, "moderation": D, "user": D, "input_fidelity": D}
IMAGEN = ImageCaps(_COMMON, max_n=4)
NATIVE = ImageCaps({**_COMMON, "output_format": D, "output_compression": D, "mask": D}, max_n=1)


def is_imagen(model: str) -> bool:
    return model.startswith("imagen")


class GeminiImages:
    if TYPE_CHECKING:  # the Gemini adapter's
        import aiohttp

        errors: ErrorMap
        _session: aiohttp.ClientSession
        _headers: dict[str, str]

        def _url(self, model: str, method: str) -> str: ...

    async def generate_image(
        self, request: GatewayRequest[ImageRequest], target: Target, info: CallInfo
    ) -> ImagesAnswer:
        model = target.upstream_model
        plan = plan_images(request, IMAGEN if is_imagen(model) else NATIVE, target, info)
        body = plan.request.body
        if is_imagen(model):
            return await self._calls(target, info, plan.counts, "predict", lambda n: tr.build_predict(body, n),
                                     lambda data: tr.to_answer(data, body))  # fmt: skip
        payload = tr.build_content(body.prompt, [], body.size)
        return await self._calls(target, info, plan.counts, "generateContent", lambda n: payload, tr.content_answer)

    async def edit_image(
        self, request: GatewayRequest[ImageEditRequest], target: Target, info: CallInfo
    ) -> ImagesAnswer:
        if is_imagen(target.upstream_model):
            raise cannot(target, "edit images")
        plan = plan_images(request, NATIVE, target, info)
        body = plan.request.body
        payload = tr.build_content(body.prompt, body.image, body.size)
        return await self._calls(target, info, plan.counts, "generateContent", lambda n: payload, tr.content_answer)

    async def _calls(
        self,
        target: Target,
        info: CallInfo,
        counts: tuple[int, ...],
        method: str,
        build: Callable[[int], dict[str, Any]],
        read: Callable[[Any], ImagesAnswer],
    ) -> ImagesAnswer:
        url = self._url(target.upstream_model, method)

        async def one(n: int) -> ImagesAnswer:
            data, _ = await http.post_json_within(
                target, info.timeouts, self._session, url, build(n), self._headers, self.errors
            )
            return read(data)

        try:
            answers: list[Any] = await asyncio.gather(*(one(n) for n in counts))
        except ProviderFailure as failure:
            raise self.errors.failure(failure) from failure
        return merge_answers(answers)
