"""Which provider kinds exist: the built-in ones and any installed plugin's, by name.

Kept apart from `providers.registry` (which builds adapters from a config) so that the config can check a
provider's `kind` when it is read without importing the provider modules, which import the config.
Entry points in the `inferplex.providers` group name a factory `create(provider_config, resources) -> Adapter`;
registering the built-in kinds the same way as third-party ones (as simonw/llm does) keeps the core free of
`if kind == ...`.
"""

from __future__ import annotations

from inferplex.plugins import PluginTable

BUILTIN = {
    "openai": "inferplex.providers.openai_compat:create",
    "local": "inferplex.providers.local:create",
    "anthropic": "inferplex.providers.anthropic:create",
    "gemini": "inferplex.providers.gemini:create",
    "azure": "inferplex.providers.azure:create",
    "bedrock": "inferplex.providers.bedrock:create",
    "replicate": "inferplex.providers.tasks:create",
}

TABLE = PluginTable("inferplex.providers", BUILTIN)


def known_kinds() -> set[str]:
    return set(TABLE.names())
