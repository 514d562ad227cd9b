"""Every endpoint family, and the start-up check that each model's providers can serve it.

A model is typed by what it serves (`ModelConfig.type`: chat, embedding); the families of that type that are
`required` must be implemented by the adapter of every provider the model is deployed on. Checked once, when
the gateway starts, so a misconfiguration is a clear error naming the model and provider, never a request
that fails (or an adapter method that raises "not supported") later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inferplex.config import Config, ConfigError
from inferplex.families.base import Family
from inferplex.families.chat import CHAT
from inferplex.families.embeddings import EMBEDDINGS
from inferplex.families.images import IMAGE_EDITS, IMAGE_VARIATIONS, IMAGES
from inferplex.families.speech import SPEECH
from inferplex.families.token_count import TOKEN_COUNT
from inferplex.families.transcription import TRANSCRIPTION, TRANSLATION
from inferplex.families.videos import VIDEOS

FAMILIES: tuple[Family[Any, Any, Any], ...] = (
    CHAT,
    EMBEDDINGS,
    TOKEN_COUNT,
    SPEECH,
    TRANSCRIPTION,
    TRANSLATION,
    VIDEOS,
    IMAGES,
    IMAGE_EDITS,
    IMAGE_VARIATIONS,
)


def model_types() -> set[str]:
    return {f.model_type for f in FAMILIES}


def check_adapters(config: Config, adapters: Mapping[str, Any], source: str = "<config>") -> None:
    """A ConfigError naming every deployment whose provider cannot serve its model's required families."""
    problems = []
    for i, m in enumerate(config.models):
        for family in FAMILIES:
            if family.model_type != m.type or not family.required:
                continue
            for d in m.deployments:
                if not family.supported_by(adapters[d.provider]):
                    problems.append(
                        f"  models[{i}]: model {m.name!r} (type {m.type}) is deployed on provider "
                        f"{d.provider!r}, which cannot serve {family.name} requests"
                    )
    if problems:
        raise ConfigError(f"{source}: invalid configuration\n" + "\n".join(dict.fromkeys(problems)))
