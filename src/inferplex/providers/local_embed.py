"""Sentence embeddings in-process: a BERT encoder (all-MiniLM-L6-v2) as a numpy forward pass.

Why numpy and not sentence-transformers: measured on this project's 2-core reference machine (see
docs/benchmarks.md, "Bundled local models"), the forward pass below gives the same vectors (cosine >= 0.9999)
from the same safetensors weights while loading several times faster and keeping a fraction of the resident
memory, because it needs neither torch nor transformers: only `tokenizers` (the Rust tokenizer both share),
`safetensors` and numpy, which llama-cpp-python already brings.

What it computes is exactly sentence-transformers' pipeline for this model: WordPiece with truncation at
`max_seq_length` (256), BERT with exact (erf) GELU, mean pooling over the attention mask (or the CLS token,
for encoders whose 1_Pooling/config.json says so), L2 normalisation.
Inputs longer than the limit are truncated, as sentence-transformers does; the usage counts the tokens that
were actually embedded. Batches are sorted by length so that padding costs little.
"""

from __future__ import annotations

import functools
import json
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]

REQUIRED_FILES = ("config.json", "tokenizer.json", "model.safetensors")


@dataclass(frozen=True, slots=True)
class EmbedSpec:
    """Where a BERT-family sentence encoder lives and how to run it."""

    name: str
    directory: Path
    max_length: int | None = None  # default: sentence_bert_config.json's max_seq_length, else 256
    batch_size: int = 32


def check_model_dir(directory: Path) -> str | None:
    """Why `directory` cannot hold an encoder, or None if it looks usable (checked at start-up)."""
    if not directory.is_dir():
        return f"{directory} is not a directory"
    missing = [f for f in REQUIRED_FILES if not (directory / f).is_file()]
    if missing:
        return f"{directory} lacks {', '.join(missing)}"
    return None


def _erf(x: F32) -> F32:
    """erf to ~1.5e-7 (Abramowitz & Stegun 7.1.26): numpy has no erf, and BERT's GELU is the exact one."""
    # Beyond 4, erf is 1 in float32; clipping also keeps exp() out of the (slow) subnormal range.
    a = np.minimum(np.abs(x), np.float32(4.0))
    t = 1.0 / (1.0 + np.float32(0.3275911) * a)
    poly = np.float32(1.061405429) * t
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += np.float32(c)
        poly *= t
    np.multiply(a, a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    a *= poly
    np.subtract(np.float32(1.0), a, out=a)
    out: F32 = np.copysign(a, x)
    return out


def _gelu(x: F32) -> F32:
    # In place where possible: for arrays this size, fresh allocations (page faults) cost more than the maths.
    out = _erf(x * np.float32(1 / math.sqrt(2)))
    out += np.float32(1.0)
    out *= x
    out *= np.float32(0.5)
    return out


def _layer_norm(x: F32, weight: F32, bias: F32, eps: float) -> F32:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    out: F32 = ((x - mean) / np.sqrt(var + eps) * weight + bias).astype(np.float32)
    return out


@functools.cache
def _weights(path: Path) -> dict[str, F32]:
    """The weights, loaded once per process: the `local` provider and the injection guard share them
    (read-only) instead of holding two copies of the same 90 MB."""
    from safetensors.numpy import load_file

    # Checkpoints saved from BertForX prefix every name with "bert."; sentence-transformers' do not.
    w = {k.removeprefix("bert."): v.astype(np.float32, copy=False) for k, v in load_file(str(path)).items()}
    # Pre-transpose the dense weights once so that each layer is a plain `x @ W`.
    for key in list(w):
        if key.endswith(".weight") and w[key].ndim == 2 and key.startswith("encoder."):
            w[key] = np.ascontiguousarray(w[key].T)
    return w


class BertEncoder:
    """The loaded weights and tokenizer; `encode` is synchronous and meant for a worker thread."""

    def __init__(self, spec: EmbedSpec) -> None:
        from tokenizers import Tokenizer

        config: dict[str, Any] = json.loads((spec.directory / "config.json").read_text())
        self.hidden = int(config["hidden_size"])
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        max_positions = int(config.get("max_position_embeddings", 512))
        st_file = spec.directory / "sentence_bert_config.json"
        st_config: dict[str, Any] = json.loads(st_file.read_text()) if st_file.is_file() else {}
        self.max_length = min(spec.max_length or int(st_config.get("max_seq_length", 256)), max_positions)
        self.batch_size = spec.batch_size
        self.w = _weights(spec.directory / "model.safetensors")
        # sentence-transformers' pooling choice (all-MiniLM: mean; the BGE family: CLS); vectors are always
        # L2-normalised, as OpenAI's are.
        pooling_file = spec.directory / "1_Pooling" / "config.json"
        pooling: dict[str, Any] = json.loads(pooling_file.read_text()) if pooling_file.is_file() else {}
        if pooling.get("pooling_mode_max_tokens") or pooling.get("pooling_mode_mean_sqrt_len_tokens"):
            raise ValueError(f"{pooling_file}: only mean or CLS pooling is supported")
        self.cls_pooling = bool(pooling.get("pooling_mode_cls_token")) and not pooling.get("pooling_mode_mean_tokens")
        self.tokenizer = Tokenizer.from_file(str(spec.directory / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.max_length)
        self.tokenizer.no_padding()
        self._lock = threading.Lock()

    @property
    def dimensions(self) -> int:
        return self.hidden

    def encode(self, texts: list[str]) -> tuple[F32, int]:
        """Unit-length embeddings for `texts` (in order) and the number of tokens embedded."""
        with self._lock:  # one forward pass at a time: numpy's BLAS already uses every core
            encodings = self.tokenizer.encode_batch(texts)
            ids = [e.ids for e in encodings]
            total = sum(len(i) for i in ids)
            out = np.empty((len(texts), self.hidden), dtype=np.float32)
            order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
            for start in range(0, len(order), self.batch_size):
                batch = order[start : start + self.batch_size]
                out[batch] = self._forward([ids[i] for i in batch])
            return out, total

    def _forward(self, batch: list[list[int]]) -> F32:
        w = self.w
        length = max(len(i) for i in batch)
        ids = np.zeros((len(batch), length), dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.float32)
        for row, seq in enumerate(batch):
            ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1.0
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][0][None, None, :]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        b, t, d = x.shape
        h = self.heads
        hd = d // h
        scale = np.float32(1 / math.sqrt(hd))
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def dense(inp: F32, name: str, prefix: str = p) -> F32:
                # One 2-D GEMM: numpy's stacked 3-D matmul does not reach BLAS as efficiently.
                flat = inp.reshape(-1, inp.shape[-1]) @ w[prefix + name + ".weight"]
                flat += w[prefix + name + ".bias"]
                out: F32 = flat.reshape(*inp.shape[:-1], -1)
                return out

            q = dense(x, "attention.self.query").reshape(b, t, h, hd).transpose(0, 2, 1, 3)
            k = dense(x, "attention.self.key").reshape(b, t, h, hd).transpose(0, 2, 3, 1)
            v = dense(x, "attention.self.value").reshape(b, t, h, hd).transpose(0, 2, 1, 3)
            scores = (q @ k) * scale + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
            x = _layer_norm(
                dense(ctx, "attention.output.dense") + x,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                self.eps,
            )
            inter = _gelu(dense(x, "intermediate.dense"))
            x = _layer_norm(
                dense(inter, "output.dense") + x,
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
                self.eps,
            )
        if self.cls_pooling:
            pooled = x[:, 0, :]
        else:
            pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: F32 = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return result
