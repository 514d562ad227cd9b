"""What the OpenAI-compatible adapter can do: everything natively, since canonical *is* OpenAI's shape.

Vendor profiles (`profiles.py`) still drop the parameters a particular vendor rejects, and name them in
`x-inferplex-dropped-params`; this declaration describes OpenAI itself, for the generated matrix.
"""

from __future__ import annotations

from inferplex.capabilities import N, ProviderCapabilities

CAPABILITIES = ProviderCapabilities(
    audio_input=N,
    notes=(
        "the request is forwarded nearly as sent; a vendor profile's unsupported parameters are dropped and "
        "named in `x-inferplex-dropped-params`.",
        "prompt caching is automatic on OpenAI and reported as `prompt_tokens_details.cached_tokens`.",
        "Anthropic's own details (thinking, top_k, cache_control) are forwarded as sent, like any field the "
        "gateway does not know; the Anthropic dialect does not send them here, and names them as dropped.",
    ),
)
