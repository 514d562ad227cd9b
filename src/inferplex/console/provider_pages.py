"""Providers and deployments (`/ui/providers`) and models with their prices (`/ui/models`).

The providers page shows each deployment as the router sees it now (routing/health.snapshot: breaker,
time until it lets a probe through, requests in flight, latency averages, RPM/TPM used against its limits,
the capacity queue) and the newest failed upstream attempts from the request log (store/request_log.py),
of every deployment or of one (`?deployment=`). The models page is the catalog as configured: each model,
its deployments, and what it costs (a deployment's own prices where it has them). Nothing here reads a
provider's credentials.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from inferplex.accounts.wiring import AccountServices
from inferplex.config import ModelConfig, Pricing
from inferplex.console import query, render, session
from inferplex.console.query import BadQuery
from inferplex.routing.health import snapshot
from inferplex.store.request_log import RequestLog
from inferplex.targets import Target

RECENT_ERRORS = 25


def _router(request: Request) -> Any:
    return request.app.state.services.pipeline.router


def _limit(used: int | None, limit: int | None) -> str:
    if limit is None:
        return ""
    return f"{used if used is not None else 0} / {limit}"


def deployment_view(row: dict[str, Any]) -> dict[str, Any]:
    state = str(row["breaker"])
    retry = float(row["retry_in_s"] or 0)
    return {
        "deployment": row["deployment"],
        "model": row["model"],
        "provider": row["provider"],
        "kind": row["kind"],
        "upstream_model": row["upstream_model"],
        "breaker": state,
        "breaker_text": state.replace("_", "-"),
        "retry_in": f"{retry:.0f} s" if state == "open" and retry > 0 else "",
        "in_flight": row["in_flight"],
        "queued": row["queued"],
        "max_concurrent": row["max_concurrent"] or "",
        "ttft": query.ms(row["ttft_ms"]),
        "per_token": query.ms(row["per_token_ms"]),
        "rpm": _limit(row["rpm_used"], row["rpm_limit"]),
        "tpm": _limit(row["tpm_used"], row["tpm_limit"]),
    }


def error_view(row: dict[str, Any]) -> dict[str, Any]:
    status = row.get("status")
    return {
        "request_id": row["request_id"],
        "when": query.utc(row["created_at"]),
        "model": row.get("model") or "",
        "deployment": row.get("deployment") or "",
        "outcome": row.get("outcome") or "",
        "status": status if status is not None else "",
        "error": row.get("error") or "",
        "error_type": row.get("error_type") or "",
        "latency": query.ms(row.get("latency_ms")),
    }


async def _recent_errors(accounts: AccountServices, deployment: str | None) -> list[dict[str, Any]]:
    await accounts.usage_log.flush()
    return await RequestLog(accounts.usage.db).recent_errors(deployment, RECENT_ERRORS)


async def providers_page(request: Request) -> Response:
    await session.signed_in(request)
    config = request.app.state.accounts.config
    try:
        deployment = query.text(request.query_params, "deployment")
    except BadQuery as bad:
        raise bad.as_error() from None
    health = [deployment_view(dict(r)) for r in await snapshot(_router(request))]
    errors = await _recent_errors(request.app.state.accounts, deployment)
    providers = []
    for p in config.providers:
        mine = [h for h in health if h["provider"] == p.name]
        providers.append(
            {
                "name": p.name,
                "kind": p.kind,
                "profile": p.profile or "",
                "base_url": p.base_url or "",
                "deployments": len({h["deployment"] for h in mine}),
                "open": len({h["deployment"] for h in mine if h["breaker"] != "closed"}),
            }
        )
    context = {
        "providers": providers,
        "deployments": health,
        "errors": [error_view(e) for e in errors],
        "deployment": deployment or "",
    }
    return render.page(request, "providers.html", context)


_TOKENS = "per 1M tokens"
_PRICES: tuple[tuple[str, str, str], ...] = (
    ("input", "input", _TOKENS),
    ("output", "output", _TOKENS),
    ("cached_input", "cached input", _TOKENS),
    ("cache_write", "cache write", _TOKENS),
    ("image_input", "image input", _TOKENS),
    ("image_output", "image output", _TOKENS),
    ("audio_input", "audio input", _TOKENS),
    ("audio_output", "audio output", _TOKENS),
    ("character", "characters", "per 1M characters"),
    ("image", "image", "each"),
    ("audio_second", "audio", "per second"),
    ("video_second", "video", "per second"),
)


def _dollars(value: Decimal) -> str:
    """A configured price as written, to the cent at least ($0.60, $0.075, $2.00)."""
    whole, _, frac = f"{value:f}".partition(".")
    return f"${whole}.{frac.rstrip('0').ljust(2, '0')}"


def prices(pricing: Pricing | None) -> list[str]:
    """A price list as the page shows it: every rate that is set, in the unit it is priced by."""
    if pricing is None:
        return []
    if pricing.free:
        return ["free"]
    out: list[str] = []
    for field, name, unit in _PRICES:
        value = getattr(pricing, field)
        if value:
            out.append(f"{name} {_dollars(value)} {unit}")
    out += [f"image {size} {_dollars(v)} each" for size, v in pricing.image_by.items()]
    out += [f"video {res} {_dollars(v)} per second" for res, v in pricing.video_second_by.items()]
    return out or ["no price set: costs nothing"]


def _target_view(target: Target) -> dict[str, Any]:
    d = target.deployment
    limits = [f"{d.rpm} rpm" if d.rpm else "", f"{d.tpm} tpm" if d.tpm else "",
              f"{d.max_concurrent} at once" if d.max_concurrent else ""]  # fmt: skip
    return {
        "key": target.key,
        "provider": target.provider.name,
        "kind": target.provider.kind,
        "upstream_model": d.model,
        "region": d.region or "",
        "priority": d.priority,
        "weight": f"{d.weight:g}",
        "dedicated": d.dedicated,
        "limits": ", ".join(x for x in limits if x),
        "prices": prices(d.pricing),
        "flex_prices": prices(d.flex_pricing),
    }


def model_view(model: ModelConfig, targets: tuple[Target, ...]) -> dict[str, Any]:
    return {
        "name": model.name,
        "type": model.type,
        "display_name": model.display_name or "",
        "description": model.description or "",
        "context_window": model.context_window or "",
        "max_output": model.max_output or "",
        "prices": prices(model.pricing),
        "flex_prices": prices(model.flex_pricing),
        "strategy": model.routing.strategy,
        "fallbacks": model.routing.fallbacks,
        "deployments": [_target_view(t) for t in targets],
    }


async def models_page(request: Request) -> Response:
    await session.signed_in(request)
    catalog = request.app.state.services.pipeline.catalog
    models = [model_view(m, catalog.targets(m)) for m in catalog.models]
    return render.page(request, "models.html", {"models": models})


ROUTES: list[Route] = [
    Route("/ui/providers", render.guarded(providers_page), methods=["GET"]),
    Route("/ui/models", render.guarded(models_page), methods=["GET"]),
]
