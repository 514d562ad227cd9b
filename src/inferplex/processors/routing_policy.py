"""`routing_policy`: choose the model by a policy, among those the key may use, and report the choice.

It runs before the pipeline resolves the model, and rewrites `model` (so the request's own `model` may be a
placeholder such as `auto`). Candidates are the catalog's chat models the key may use (or the `candidates`
option's subset), that have the capabilities the request needs (tools when it sends tools, vision when it
sends images, json_schema when it asks for one, plus the `requires` option) and whose context window holds
the prompt (estimated at 4 characters a token) plus the requested output. Policies:

- `cheapest`: lowest estimated cost of this request at list prices, compared exactly in micro-USD (the
  prompt, plus `max_tokens` of output or EXPECTED_OUTPUT when unset); reported rounded up to whole micros;
- `fastest`: lowest observed time to first token on any of the model's deployments (the router's moving
  averages); models not yet observed rank after observed ones, cheapest first;
- `largest_context`: the largest context window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from inferplex.canonical import ChatRequest
from inferplex.config import ModelConfig
from inferplex.errors import InvalidRequest, ProcessorRejected
from inferplex.gateway_request import GatewayRequest
from inferplex.processors.base import Env, Exchange, Step, check_options, choice
from inferplex.processors.text import texts

CAPABILITIES = ("tools", "vision", "json_schema")
CHARS_PER_TOKEN = 4
EXPECTED_OUTPUT = 256  # output tokens assumed when pricing a request that sets no max_tokens


@dataclass(frozen=True, slots=True)
class Need:
    prompt_tokens: int
    output_tokens: int  # the request's max_tokens, 0 when unset (what must fit the context window)
    capabilities: frozenset[str]

    @property
    def priced_output(self) -> int:
        return self.output_tokens or EXPECTED_OUTPUT


def need_of(request: ChatRequest, required: frozenset[str]) -> Need:
    caps = set(required)
    if request.tools:
        caps.add("tools")
    if any(isinstance(m.content, list) and any(p.type == "image_url" for p in m.content) for m in request.messages):
        caps.add("vision")
    if request.response_format is not None and request.response_format.type == "json_schema":
        caps.add("json_schema")
    chars = sum(len(t) for t in texts(request))
    return Need(-(-chars // CHARS_PER_TOKEN), request.output_limit or 0, frozenset(caps))


def cost(model: ModelConfig, need: Need) -> Decimal:
    """The estimated cost in micro-USD, exact (USD per million tokens is micro-USD per token)."""
    p = model.pricing
    return Decimal(need.prompt_tokens) * p.input + Decimal(need.priced_output) * p.output


def cost_micros(model: ModelConfig, need: Need) -> int:
    return int(cost(model, need).to_integral_value(rounding="ROUND_CEILING"))


def fits(model: ModelConfig, need: Need) -> str | None:
    """Why `model` cannot serve the need, or None."""
    missing = [c for c in sorted(need.capabilities) if not getattr(model.capabilities, c)]
    if missing:
        return "lacks " + ", ".join(missing)
    if model.context_window is not None and need.prompt_tokens + need.output_tokens > model.context_window:
        return "context window too small"
    return None


class RoutingPolicy(Step):
    name = "routing_policy"
    order = 60

    def __init__(self, policy: str, candidates: tuple[str, ...] | None, requires: frozenset[str], env: Env) -> None:
        super().__init__()
        self.policy = policy
        self.candidates = candidates
        self.requires = requires
        self.env = env

    def _latency(self, model: ModelConfig) -> float | None:
        assert self.env.catalog is not None
        seen = [ms for t in self.env.catalog.targets(model) if (ms := self.env.latency_ms(t)) is not None]
        return min(seen) if seen else None

    def rank(self, models: list[ModelConfig], need: Need) -> list[ModelConfig]:
        if self.policy == "cheapest":
            return sorted(models, key=lambda m: (cost(m, need), m.name))
        if self.policy == "largest_context":
            return sorted(models, key=lambda m: (-(m.context_window or 0), cost(m, need), m.name))

        def by_speed(m: ModelConfig) -> tuple[bool, float, Decimal, str]:
            ms = self._latency(m)
            return (ms is None, ms or 0.0, cost(m, need), m.name)

        return sorted(models, key=by_speed)

    async def pre(self, ex: Exchange, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]:
        if self.env.catalog is None:
            raise ProcessorRejected("Processor `routing_policy` has no catalog to choose from.")
        body = request.body
        need = need_of(body, self.requires)
        pool = [m for m in self.env.catalog.models if m.type == "chat" and ex.may_use(m.name)]
        if self.candidates is not None:
            pool = [m for m in pool if m.name in self.candidates]
        excluded = {m.name: why for m in pool if (why := fits(m, need)) is not None}
        eligible = [m for m in pool if m.name not in excluded]
        if not eligible:
            raise ProcessorRejected(
                f"Processor `routing_policy` rejected the request: no model the key may use fits it "
                f"({len(pool)} considered; needs {', '.join(sorted(need.capabilities)) or 'no capabilities'} "
                f"and about {need.prompt_tokens + need.output_tokens} tokens of context).",
                param="model",
            )
        chosen = self.rank(eligible, need)[0]
        self.metadata.update(
            policy=self.policy,
            requested=body.model,
            chosen=chosen.name,
            considered=len(pool),
            eligible=len(eligible),
            excluded=excluded,
            estimated_cost_micros=cost_micros(chosen, need),
        )
        if self.policy == "fastest":
            latency = self._latency(chosen)
            self.metadata["ttft_ms"] = None if latency is None else round(latency, 2)
        return request.replace(body.model_copy(update={"model": chosen.name}))


def create(options: Mapping[str, Any], env: Env) -> RoutingPolicy:
    check_options("routing_policy", options, {"policy", "candidates", "requires"})
    policy = choice("routing_policy", options, "policy", ("cheapest", "fastest", "largest_context"))
    candidates = options.get("candidates")
    if candidates is not None and (
        not isinstance(candidates, list) or not candidates or not all(isinstance(c, str) for c in candidates)
    ):
        raise InvalidRequest(
            "Processor `routing_policy`: `candidates` must be a non-empty list of model names.", param="processors"
        )
    requires = options.get("requires", [])
    if not isinstance(requires, list) or not all(r in CAPABILITIES for r in requires):
        raise InvalidRequest(
            f"Processor `routing_policy`: `requires` must list capabilities among {', '.join(CAPABILITIES)}.",
            param="processors",
        )
    return RoutingPolicy(policy, tuple(candidates) if candidates else None, frozenset(requires), env)
