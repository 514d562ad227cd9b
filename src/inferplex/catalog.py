"""The model catalog: public model names, their deployments, and how a request's model string is read.

Every addressing style the seeds use resolves here, in one place:
- a public name (`gpt-4o-mini`): all of its deployments;
- `model@provider` (Unify): that model's deployments on that provider;
- a `provider` field beside `model` (OneInfer): the same;
- `provider/model` (OpenRouter style): the same, when the prefix is a configured provider and the whole
  string is not itself a public name.
With a provider named, `model` may also be the provider's own upstream id for a catalogued deployment.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferplex.config import Config, ModelConfig
from inferplex.errors import InvalidRequest, NotFound
from inferplex.targets import Target


@dataclass(frozen=True, slots=True)
class Resolved:
    model: ModelConfig
    targets: tuple[Target, ...]


class Catalog:
    def __init__(self, config: Config) -> None:
        self._config = config
        self._models = {m.name: m for m in config.models}
        self._providers = {p.name: p for p in config.providers}
        self._targets: dict[str, tuple[Target, ...]] = {
            m.name: tuple(Target(m, d, self._providers[d.provider]) for d in m.deployments) for m in config.models
        }
        self._cache: dict[tuple[str, str | None], Resolved] = {}
        self._deployment_ids = {d.id for m in config.models for d in m.deployments if d.id is not None}

    @property
    def models(self) -> list[ModelConfig]:
        return list(self._models.values())

    def has_provider(self, name: str) -> bool:
        return name in self._providers

    def targets(self, model: ModelConfig) -> tuple[Target, ...]:
        return self._targets[model.name]

    def default_model(self, provider: str, kind: str = "chat") -> str:
        """The first configured model of `kind` that `provider` serves: OneInfer's request names a provider
        and may leave out the model. A 400 naming `model` when the provider serves none."""
        for m in self._models.values():
            if m.type == kind and any(t.provider.name == provider for t in self._targets[m.name]):
                return m.name
        raise InvalidRequest(f"Provider `{provider}` serves no {kind} model here: name one in 'model'.", param="model")

    def check_endpoint(self, endpoint_id: str) -> None:
        """A 400 unless some deployment is configured with this id (a request's `endpoint_id`), checked
        before anything is reserved; whether it serves the requested model is the router's check."""
        if endpoint_id not in self._deployment_ids:
            raise InvalidRequest(
                f"Unknown endpoint_id `{endpoint_id}`: no such endpoint is configured on this gateway.",
                param="endpoint_id",
                code="endpoint_not_found",
            )

    def resolve(self, model: str, provider: str | None = None, *, kind: str = "chat") -> Resolved:
        key = (model, provider)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._resolve(model, provider)
            if len(self._cache) < 4096:
                self._cache[key] = hit
        if hit.model.type != kind:
            raise InvalidRequest(
                f"The model `{hit.model.name}` is a {hit.model.type} model and cannot be used for {kind}.",
                param="model",
                code="model_not_supported",
            )
        return hit

    def _resolve(self, model: str, provider: str | None) -> Resolved:
        if provider is None and "@" in model:
            model, _, provider = model.rpartition("@")
            if not model or not provider:
                raise InvalidRequest(
                    "The model must be written as `model@provider`.", param="model", code="invalid_model"
                )
        if provider is None and model not in self._models and "/" in model:
            prefix, _, rest = model.partition("/")
            if prefix in self._providers:
                model, provider = rest, prefix
        if provider is None:
            found = self._models.get(model)
            if found is None:
                raise _not_found(model)
            return Resolved(found, self._targets[model])
        if provider not in self._providers:
            raise NotFound(
                f"The provider `{provider}` is not configured on this gateway.",
                param="provider",
                code="provider_not_found",
            )
        by_name = self._models.get(model)
        if by_name is not None:
            targets = tuple(t for t in self._targets[model] if t.provider.name == provider)
            if targets:
                return Resolved(by_name, targets)
        for m in self._models.values():
            targets = tuple(
                t for t in self._targets[m.name] if t.provider.name == provider and t.upstream_model == model
            )
            if targets:
                return Resolved(m, targets)
        raise NotFound(
            f"The model `{model}` is not served by provider `{provider}` on this gateway.",
            param="model",
            code="model_not_found",
        )


def _not_found(model: str) -> NotFound:
    return NotFound(
        f"The model `{model}` does not exist or you do not have access to it.", param="model", code="model_not_found"
    )
