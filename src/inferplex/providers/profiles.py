"""OpenAI-compatible vendors as data: what each one does differently from OpenAI.

One adapter (`openai_compat`) serves them all; this table is the whole of their differences (default base
URL, auth header, parameters they reject or name differently), as Portkey's gateway does. A provider in the
config picks its profile with `profile:` (defaulting to its `name` when that is a known vendor, else `openai`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class VendorProfile:
    name: str
    base_url: str | None = None
    auth_header: str = "Authorization"
    auth_prefix: str = "Bearer "
    # Parameters the vendor rejects: `capabilities.plan` drops them (named in x-inferplex-dropped-params), or
    # refuses the request with `drop_params: false`, as for every provider.
    unsupported: frozenset[str] = frozenset()
    # Parameters the vendor spells differently: canonical name -> vendor name.
    renames: dict[str, str] = field(default_factory=dict)
    # Whether `stream_options.include_usage` is understood; if not, usage is read from the last chunk.
    stream_usage_option: bool = True
    needs_key: bool = True


_LOCAL_SERVER_UNSUPPORTED = frozenset({"service_tier", "metadata", "store", "parallel_tool_calls"})

PROFILES: dict[str, VendorProfile] = {
    p.name: p
    for p in (
        VendorProfile("openai", "https://api.openai.com/v1"),
        VendorProfile(
            "groq",
            "https://api.groq.com/openai/v1",
            unsupported=frozenset({"logprobs", "top_logprobs", "logit_bias", "metadata", "store"}),
        ),
        VendorProfile(
            "deepseek",
            "https://api.deepseek.com/v1",
            unsupported=frozenset({"n", "logit_bias", "seed", "service_tier", "metadata", "parallel_tool_calls"}),
            renames={"max_completion_tokens": "max_tokens"},
        ),
        VendorProfile(
            "mistral",
            "https://api.mistral.ai/v1",
            unsupported=frozenset({"logit_bias", "logprobs", "top_logprobs", "user", "service_tier", "metadata"}),
            renames={"seed": "random_seed", "max_completion_tokens": "max_tokens"},
        ),
        VendorProfile(
            "fireworks",
            "https://api.fireworks.ai/inference/v1",
            unsupported=frozenset({"service_tier", "metadata", "store"}),
            renames={"max_completion_tokens": "max_tokens"},
        ),
        VendorProfile(
            "together",
            "https://api.together.xyz/v1",
            unsupported=frozenset({"service_tier", "metadata", "store", "parallel_tool_calls"}),
            renames={"max_completion_tokens": "max_tokens"},
        ),
        VendorProfile(
            "novita",
            "https://api.novita.ai/v3/openai",
            unsupported=frozenset({"service_tier", "metadata", "store"}),
            renames={"max_completion_tokens": "max_tokens"},
        ),
        VendorProfile("openrouter", "https://openrouter.ai/api/v1", unsupported=frozenset({"store"})),
        VendorProfile(
            "xai", "https://api.x.ai/v1", unsupported=frozenset({"service_tier", "metadata", "store", "logit_bias"})
        ),
        VendorProfile(
            "ollama",
            "http://127.0.0.1:11434/v1",
            unsupported=_LOCAL_SERVER_UNSUPPORTED | {"logit_bias", "n"},
            renames={"max_completion_tokens": "max_tokens"},
            needs_key=False,
        ),
        VendorProfile(
            "vllm",
            "http://127.0.0.1:8000/v1",
            unsupported=_LOCAL_SERVER_UNSUPPORTED,
            needs_key=False,
        ),
        VendorProfile(
            "llamacpp",
            "http://127.0.0.1:8080/v1",
            unsupported=_LOCAL_SERVER_UNSUPPORTED | {"logit_bias"},
            renames={"max_completion_tokens": "max_tokens"},
            needs_key=False,
        ),
        VendorProfile(
            "lmstudio",
            "http://127.0.0.1:1234/v1",
            unsupported=_LOCAL_SERVER_UNSUPPORTED | {"logit_bias", "n"},
            renames={"max_completion_tokens": "max_tokens"},
            needs_key=False,
        ),
    )
}


def profile_for(name: str | None, provider_name: str) -> VendorProfile:
    if name is not None:
        return PROFILES[name]
    return PROFILES.get(provider_name, PROFILES["openai"])
