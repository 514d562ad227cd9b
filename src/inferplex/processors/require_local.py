"""`require_local` (Inferada's name): serve the request only from a deployment that runs on premises.

Each deployment says where it runs (`location` in the config; unset, the bundled `local` runtime is on
premises and every other provider cloud: `targets.Target.location`). Before anything is reserved, the
processor refuses with a 422 a request whose model has no on-premises deployment (or whose `endpoint_id`
names a cloud one); otherwise it sets the request's `location` option, and the router, which narrows every
group of deployments by the request's options (routing/router.py `_narrow`), then never picks a cloud
deployment, for the model or any fallback. The router does not know which processor asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from inferplex.canonical import ChatRequest
from inferplex.errors import ProcessorRejected
from inferplex.gateway_request import GatewayRequest
from inferplex.processors.base import Env, Exchange, Step, check_options

ON_PREMISES = "on_premises"


class RequireLocal(Step):
    name = "require_local"
    order = 65  # after routing_policy (60), which may choose the model

    def __init__(self, env: Env) -> None:
        super().__init__()
        self.env = env

    async def pre(self, ex: Exchange, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]:
        catalog = self.env.catalog
        if catalog is None:
            raise ProcessorRejected("Processor `require_local` has no catalog to check deployments in.")
        opts = request.options
        resolved = catalog.resolve(request.body.model, opts.provider_name)  # a 404 as the pipeline's own
        name = resolved.model.name
        if not ex.may_use(name):
            return request  # the pipeline refuses it (403) without telling where its deployments run
        if opts.endpoint_id is not None:
            targets = [t for t in resolved.targets if t.deployment.id == opts.endpoint_id]
        else:
            targets = [t for t in resolved.targets if not t.deployment.dedicated]
        local = [t for t in targets if t.location == ON_PREMISES]
        self.metadata.update(location=ON_PREMISES, eligible=len(local), excluded=len(targets) - len(local))
        if targets and not local:
            where = f"the endpoint `{opts.endpoint_id}`" if opts.endpoint_id is not None else f"`{name}`"
            raise ProcessorRejected(
                f"Processor `require_local` rejected the request: {where} has no deployment running on premises.",
                param="endpoint_id" if opts.endpoint_id is not None else "model",
            )
        return request.with_options(replace(opts, location=ON_PREMISES))


def create(options: Mapping[str, Any], env: Env) -> RequireLocal:
    check_options("require_local", options, set())
    return RequireLocal(env)
