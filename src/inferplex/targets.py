"""Where a request goes: one deployment of a public model, with its provider.

The catalog builds every `Target` once at start-up (`catalog.Catalog`), the router picks among them, and
the adapters, billing and headers read them. It lives beside the catalog rather than in the provider seam
because it is catalog data (a model, a deployment, a provider's config) that every stage shares.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inferplex.config import DeploymentConfig, ModelConfig, ProviderConfig


@dataclass(frozen=True, slots=True)
class Target:
    """Where a request goes: the public model, one of its deployments, and that deployment's provider."""

    model: ModelConfig
    deployment: DeploymentConfig
    provider: ProviderConfig
    # The deployment's name in headers, logs and the shared cooldown store; asked several times a request.
    key: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", deployment_key(self.deployment))

    @property
    def upstream_model(self) -> str:
        return self.deployment.model

    @property
    def location(self) -> str:
        """Where it runs: the deployment's `location`, else on premises for the bundled `local` runtime and
        cloud for every other kind (a URL says nothing reliable about who operates the machine)."""
        return self.deployment.location or ("on_premises" if self.provider.kind == "local" else "cloud")


def deployment_key(d: DeploymentConfig) -> str:
    """A deployment's name in headers, logs, the shared cooldown store and the cache's entries: its `id`, else
    `provider/model` (with `@region`)."""
    return d.id if d.id is not None else f"{d.provider}/{d.model}" + (f"@{d.region}" if d.region else "")
