"""The semantic cache's encoders: the bundled all-MiniLM-L6-v2 on real sentences, a configured embedding model
called through its adapter (the validating fake upstream), and start-up refusals that name the setting."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from inferplex.app import Resources, build_adapters
from inferplex.cache.backends.memory import MemoryBackend
from inferplex.cache.embedders import LocalEmbedder, ModelEmbedder
from inferplex.cache.semantic import SemanticIndex, open_embedder
from inferplex.cache.settings import SemanticSettings
from inferplex.catalog import Catalog
from inferplex.config import ConfigError, parse_config
from inferplex.pipeline import Pipeline
from inferplex.processors.embedding import bundled
from inferplex.providers.http import new_session
from tests.conftest import openai_config
from tests.fakes.openai_upstream import FakeOpenAI

needs_model = pytest.mark.skipif(bundled() is None, reason="the bundled all-MiniLM-L6-v2 is not installed")

# (a, b, what the similarity must be): measured with the bundled model, printed by the test (-s)
PAIRS = [
    ("What is the capital of France?", "Tell me the capital city of France", "> 0.8"),  # 0.92
    ("What is the capital of France?", "What's France's capital?", "> 0.95"),  # 0.98: hits at the default
    ("How do I reset my password?", "I forgot my password, how can I reset it?", "> 0.8"),  # 0.94
    ("What is the capital of France?", "How do I bake sourdough bread?", "< 0.5"),  # 0.13
    ("How do I reset my password?", "What's the weather like in Tokyo tomorrow?", "< 0.5"),  # -0.03
    # one entity apart: why the default threshold is high (0.66 here)
    ("What is the capital of France?", "What is the capital of Germany?", "< 0.8"),
]


async def pipeline_for(fake: FakeOpenAI) -> AsyncIterator[Pipeline]:
    config = parse_config(openai_config(fake), "<test>")
    session = new_session()
    adapters = build_adapters(config, Resources(session, config))
    try:
        yield Pipeline(Catalog(config), adapters)
    finally:
        for adapter in adapters.values():
            await adapter.aclose()
        await session.close()


@pytest.fixture
async def pipeline(fake_openai: FakeOpenAI) -> AsyncIterator[Pipeline]:
    async for p in pipeline_for(fake_openai):
        yield p


@needs_model
@pytest.mark.parametrize(("a", "b", "expected"), PAIRS)
async def test_the_bundled_model_scores_paraphrases_high_and_other_questions_low(
    pipeline: Pipeline, a: str, b: str, expected: str
) -> None:
    index = SemanticIndex(MemoryBackend(1 << 20), await open_embedder(SemanticSettings(), pipeline), SemanticSettings())
    va = np.frombuffer(await index.embed(a), dtype="<f4")
    vb = np.frombuffer(await index.embed(b), dtype="<f4")
    similarity = float(va @ vb)
    print(f"{similarity:.4f}  {a!r} ~ {b!r}")
    op, bound = expected.split()
    assert similarity > float(bound) if op == ">" else similarity < float(bound)
    assert index.model == "all-minilm-l6-v2"


@needs_model
async def test_a_paraphrase_is_the_nearest_entry_above_the_threshold(pipeline: Pipeline) -> None:
    settings = SemanticSettings()
    index = SemanticIndex(MemoryBackend(1 << 20), await open_embedder(settings, pipeline), settings)
    for n, text in enumerate(["What is the capital of France?", "How do I bake sourdough bread?"]):
        await index.add("p", f"{n:064x}", await index.embed(text), 2e9)
    found = await index.nearest("p", await index.embed("Tell me the capital city of France"), 0.85)
    assert [i for i, _ in found] == [f"{0:064x}"]
    assert await index.nearest("p", await index.embed("Explain how photosynthesis works"), 0.5) == []


async def test_the_bundled_model_missing_refuses_the_start_naming_the_setting(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("inferplex.processors.embedding.bundled", lambda: None)
    with pytest.raises(ConfigError, match=r"cache\.semantic\.embedding_model: bundled: .*not installed"):
        await open_embedder(SemanticSettings(), pipeline)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no-such-model", r"cache\.semantic\.embedding_model: no-such-model: no such model"),
        ("echo-model", r"cache\.semantic\.embedding_model: echo-model is a chat model, not an embedding model"),
    ],
)
async def test_an_embedding_model_that_is_not_one_is_refused(pipeline: Pipeline, name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        await open_embedder(SemanticSettings(embedding_model=name), pipeline)


async def test_a_configured_embedding_model_is_called_through_its_adapter_and_normalised(
    pipeline: Pipeline, fake_openai: FakeOpenAI
) -> None:
    embedder = await open_embedder(SemanticSettings(embedding_model="embed-model"), pipeline)
    assert isinstance(embedder, ModelEmbedder) and embedder.name == "embed-model"
    index = SemanticIndex(MemoryBackend(1 << 20), embedder, SemanticSettings())
    before = len(fake_openai.state.requests)
    text = "semantic probe 7f3a"
    vector = np.frombuffer(await index.embed(text), dtype="<f4")
    # the fake's vector is (len(text), index, 0.5); ours is that at unit length
    raw = np.asarray([len(text), 0, 0.5], dtype=np.float32)
    assert vector == pytest.approx(raw / np.linalg.norm(raw))
    sent = fake_openai.state.requests[before:]
    assert [r.body for r in sent] == [{"model": "text-embedding-fake", "input": [text]}]


class Base64Adapter:
    """An adapter answering base64 vectors out of order (as a provider may): both handled."""

    async def embed(self, request: Any, target: Any, info: Any) -> Any:
        import base64

        texts = request.body.input
        rows = [
            {"index": i, "embedding": base64.b64encode(np.asarray([i + 1, 0], "<f4").tobytes()).decode()}
            for i in range(len(texts))
        ]
        return {"object": "list", "data": rows[::-1]}


async def test_base64_and_unordered_vectors_from_a_provider(pipeline: Pipeline) -> None:
    model = next(m for m in pipeline.catalog.models if m.name == "embed-model")
    embedder = ModelEmbedder(pipeline.catalog.targets(model)[0], Base64Adapter())
    vectors = await embedder.embed(["a", "b"])
    assert vectors.tolist() == [[1.0, 0.0], [1.0, 0.0]]
    assert isinstance(await open_embedder(SemanticSettings(), pipeline), LocalEmbedder) or bundled() is None


DOCUMENT = "The Treaty of Westphalia was signed in 1648 and ended the Thirty Years' War. " * 12


@needs_model
async def test_a_text_longer_than_the_bundled_model_sees_is_not_compared(pipeline: Pipeline) -> None:
    from inferplex.cache.embedders import BUNDLED_WINDOW
    from inferplex.cache.semantic import TextTooLong

    encoder: Any = bundled()
    assert encoder._encoder.max_length == BUNDLED_WINDOW  # the window the check counts against
    index = SemanticIndex(MemoryBackend(1 << 20), await open_embedder(SemanticSettings(), pipeline), SemanticSettings())
    # why: past the window the encoder truncates, and two different questions after one document score 1.0
    a, b = DOCUMENT + "Who signed it?", DOCUMENT + "What year was it signed?"
    vectors = encoder.encode([a, b])
    assert float(vectors[0] @ vectors[1]) > 0.999
    assert not index.fits(a)
    with pytest.raises(TextTooLong):
        await index.embed(a)
    assert index.fits(QUESTION_SHORT) and index.fits("word " * 120)
    assert not index.fits("word " * 130)


QUESTION_SHORT = "What is the capital of France?"


@pytest.mark.parametrize(
    ("text", "fits"),
    [("a" * 510, True), ("a" * 511, False), ("é" * 255, True), ("é" * 256, False), ("😀" * 127, True)],
)
def test_a_configured_model_is_given_what_any_512_token_window_holds(pipeline: Pipeline, text: str, fits: bool) -> None:
    model = next(m for m in pipeline.catalog.models if m.name == "embed-model")
    assert ModelEmbedder(pipeline.catalog.targets(model)[0], Base64Adapter()).fits(text) is fits
