"""Imagen through the Gemini API: `POST {base}/models/{model}:predict`, a mixin of the Gemini adapter.

Translation in `translate/gemini_images.py`. What Imagen does not do: `quality`, `style`, `background`,
`moderation` and `user` are dropped and named (a 400 with `drop_params: false`); more than 4 images are
several calls; a stream is answered from one call, without partial images. Edits and variations are not
served (a 400 naming the operation).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from inferplex.capabilities import Support
from inferplex.families.images import ImageCaps, ImageRequest, ImagesAnswer, merge_answers, plan_images
from inferplex.gateway_request import GatewayRequest
from inferplex.providers import http
from inferplex.providers.base import CallInfo
from inferplex.providers.failures import ErrorMap, ProviderFailure
from inferplex.targets import Target
from inferplex.translate import gemini_images as tr

D = Support.DROPPED
IMAGE_CAPS = ImageCaps(
    {"quality": D, "style": D, "background": D, "moderation": D, "user": D, "input_fidelity": D}, max_n=4
)


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
        plan = plan_images(request, IMAGE_CAPS, target, info)
        body = plan.request.body
        url = self._url(target.upstream_model, "predict")

        async def one(n: int) -> ImagesAnswer:
            payload = tr.build_predict(body, n)
            data, _ = await http.post_json_within(
                target, info.timeouts, self._session, url, payload, self._headers, self.errors
            )
            return tr.to_answer(data, body)

        try:
            answers: list[Any] = await asyncio.gather(*(one(n) for n in plan.counts))
        except ProviderFailure as failure:
            raise self.errors.failure(failure) from failure
        return merge_answers(answers)
