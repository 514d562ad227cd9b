"""OpenTelemetry's GenAI names for what the gateway calls its families and provider kinds.

Metrics and traces label requests with `gen_ai.operation.name` and `gen_ai.provider.name`, whose values the
semantic conventions fix where they can (`chat`, `embeddings`; `openai`, `anthropic`, `gcp.gemini`,
`aws.bedrock`...), so a dashboard built for any GenAI-instrumented service reads the gateway's too. Written
once here so the two agree; a family or kind the conventions do not name keeps the gateway's own name.
"""

from __future__ import annotations

from inferplex.config import ProviderConfig
from inferplex.providers.profiles import profile_for

# Family name (families/*.py) -> gen_ai.operation.name, where the conventions name it.
_OPERATIONS = {"chat": "chat", "embedding": "embeddings"}

# Provider kind -> gen_ai.provider.name.
_KINDS = {
    "openai": "openai",
    "azure": "azure.ai.openai",
    "anthropic": "anthropic",
    "gemini": "gcp.gemini",
    "bedrock": "aws.bedrock",
}

# An OpenAI-compatible vendor's profile -> its well-known name, where it differs from the profile's.
_VENDORS = {"mistral": "mistral_ai", "xai": "x_ai"}


def operation_name(family: str | None) -> str | None:
    """`gen_ai.operation.name` of a family (`ctx.operation`): `chat`, `embeddings`, else the family's name."""
    return None if family is None else _OPERATIONS.get(family, family)


def provider_name(provider: ProviderConfig) -> str:
    """`gen_ai.provider.name` of a configured provider: its kind's well-known name, and for an
    OpenAI-compatible provider its vendor's (`groq`, `deepseek`, `mistral_ai`, `x_ai`...; `openai` itself);
    a kind the conventions do not name (`local`, `replicate`, a plugin's) keeps its kind."""
    kind = provider.kind
    if kind == "openai":
        vendor = profile_for(provider.profile, provider.name).name
        return _VENDORS.get(vendor, vendor)
    return _KINDS.get(kind, kind)
