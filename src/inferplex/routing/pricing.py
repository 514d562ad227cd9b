"""Which prices apply to an attempt: the deployment's own over the model's, and the flex tier's when used.

Billing calls `price_for(ctx.target, ctx.service_tier)` after the router has set both, so a request that
fell back to another model or deployment, or ran on the flex tier, is priced as what actually served it; a
cache hit at the price of the deployment that produced the stored answer (`deployment_price`).
"""

from __future__ import annotations

from inferplex.config import DeploymentConfig, ModelConfig, Pricing
from inferplex.targets import Target


def price_for(target: Target, tier: str = "default") -> Pricing:
    return deployment_price(target.deployment, target.model, tier)


def deployment_price(d: DeploymentConfig, m: ModelConfig, tier: str = "default") -> Pricing:
    """The price of one deployment of a model at a tier: its own, else the model's."""
    if tier == "flex":
        flex = d.flex_pricing or (m.flex_pricing if d.pricing is None else None)
        if flex is not None:
            return flex
    return d.pricing or m.pricing


def comparable_price(target: Target, tier: str = "default") -> float:
    """One number to rank deployments by cost (input + output per million tokens); not used for billing."""
    p = price_for(target, tier)
    return float(p.input + p.output)
