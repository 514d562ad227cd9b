"""Deployment health as an operator sees it: one row per deployment of each model, from the router's own state.

The console's providers page and the metrics' per-deployment gauges read the same snapshot, so the two never
disagree. Everything but the breakers is this replica's view (in flight, latency averages, RPM/TPM counts,
the capacity queue); the breakers are shared when cooldowns live in Redis, and read there in one script call
without being touched (no probe is taken by looking).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from inferplex.routing.cooldown import BreakerState

if TYPE_CHECKING:
    from inferplex.routing.router import Router


class DeploymentHealth(TypedDict):
    deployment: str  # Target.key: the deployment's `id`, else provider/model[@region]; the metrics label too
    model: str  # the public model name
    provider: str  # the provider's configured name
    kind: str  # the provider's kind (openai, anthropic, gemini, ...)
    upstream_model: str
    in_flight: int
    ttft_ms: float | None  # moving average of the time to a first token (or a buffered answer)
    per_token_ms: float | None  # moving average of the time per streamed piece
    breaker: BreakerState
    retry_in_s: float  # until an open breaker lets a probe through
    rpm_limit: int | None
    tpm_limit: int | None
    rpm_used: int | None  # in the last minute, counted only when the limit is set
    tpm_used: int | None
    max_concurrent: int | None
    queued: int  # waiting for a concurrency slot on it


def local_load(router: Router) -> dict[str, tuple[int, int]]:
    """Each deployment's attempts open, and requests waiting for one of its slots, in this process alone (no
    store read): what the health rows show, and what a worker's metrics snapshot adds to its siblings'."""
    load: dict[str, tuple[int, int]] = {}
    for model in router.catalog.models:
        for t in router.catalog.targets(model):
            if t.key not in load:
                stats = router.stats.get(t.key)
                load[t.key] = (stats.in_flight if stats is not None else 0, router.gate(t).waiting)
    return load


async def snapshot(router: Router) -> list[DeploymentHealth]:
    """Every deployment of every configured model, in configuration order."""
    targets = [t for model in router.catalog.models for t in router.catalog.targets(model)]
    keys = list(dict.fromkeys(t.key for t in targets))
    states = dict(zip(keys, await router.cooldowns.states(keys), strict=True))
    load = local_load(router)
    rows: list[DeploymentHealth] = []
    for t in targets:
        d = t.deployment
        stats = router.stats.get(t.key)
        rpm_used, tpm_used = router.window(t).used()
        breaker, retry_in = states[t.key]
        rows.append(
            DeploymentHealth(
                deployment=t.key,
                model=t.model.name,
                provider=t.provider.name,
                kind=t.provider.kind,
                upstream_model=d.model,
                in_flight=load[t.key][0],
                ttft_ms=stats.ttft_ms if stats is not None else None,
                per_token_ms=stats.per_token_ms if stats is not None else None,
                breaker=breaker,
                retry_in_s=round(retry_in, 3),
                rpm_limit=d.rpm,
                tpm_limit=d.tpm,
                rpm_used=rpm_used if d.rpm is not None else None,
                tpm_used=tpm_used if d.tpm is not None else None,
                max_concurrent=d.max_concurrent,
                queued=load[t.key][1],
            )
        )
    return rows
