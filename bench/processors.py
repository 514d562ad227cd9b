"""Detection quality and added latency of the request processors (docs/benchmarks.md, "Processors").

    .venv/bin/python bench/processors.py            # everything, about 30 s
    .venv/bin/python bench/processors.py --no-model # injection guard without the bundled embedding model
    .venv/bin/python bench/processors.py --http-runs 0   # skip the through-HTTP part

What it measures, in process (no HTTP: the HTTP path is covered by tests/processors):
1. PII detection on bench/data/pii.jsonl (hand-written sentences, each entity labelled with its kind and exact
   text; negatives full of numbers that are not PII): per-kind and overall precision and recall, an entity
   counting as found when a span of the same kind has the same text.
2. Injection detection on bench/data/injection.jsonl (attacks and benign prompts written for this set, not
   taken from the guard's corpus; benign ones use the attacks' vocabulary: "ignore whitespace", "system
   prompt for a chatbot", "developer mode on Android"): precision and recall at several thresholds, with and
   without the similarity signal.
3. Added latency per processor: its `pre` (and `post` for json_validate) on a typical 90-word prompt,
   median and p95 of 50 runs after a warm-up, plus the one-off load time of what it loads lazily.
4. The same through HTTP: the real gateway (tests/gateway_server.py) in front of the tests' fake upstream,
   client-measured latency with each processor against none, and the `timings.processors_ms` it reports.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from inferplex.canonical import ChatRequest
from inferplex.catalog import Catalog
from inferplex.config import parse_config
from inferplex.gateway_request import parse_request
from inferplex.processors import embedding
from inferplex.processors.base import Env, Exchange, load_factory
from inferplex.processors.injection import InjectionGuard, _corpus_vectors
from inferplex.processors.pii_detect import find_pii

DATA = Path(__file__).parent / "data"
PROMPT = (
    "Hi, I'm writing on behalf of our support team. A customer wrote to support@example.com from "
    "+44 20 7946 0958 about an order that never arrived; the payment was made with card 4111 1111 1111 1111. "
    "Could you draft a polite reply that apologises for the delay, explains that the parcel was held at the "
    "depot because of a wrong postcode, and offers a full refund or a free reshipment within three days? "
    "Keep it under 150 words and friendly."
)


def _load(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def _pr(tp: int, fp: int, fn: int) -> tuple[float, float]:
    return (tp / (tp + fp) if tp + fp else 1.0), (tp / (tp + fn) if tp + fn else 1.0)


def pii_quality() -> None:
    rows = _load("pii.jsonl")
    tp: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    for row in rows:
        gold = Counter((k, v) for k, v in row["entities"])
        found = Counter((s.kind, s.value.rstrip(".,;")) for s in find_pii(row["text"]))
        for key in gold | found:
            hit = min(gold[key], found[key])
            tp[key[0]] += hit
            fp[key[0]] += found[key] - hit
            fn[key[0]] += gold[key] - hit
    print(f"\nPII detection, {len(rows)} sentences, {sum(len(r['entities']) for r in rows)} labelled entities\n")
    print("| kind | labelled | found correctly | false positives | precision | recall |")
    print("| --- | --- | --- | --- | --- | --- |")
    for kind in sorted(set(tp) | set(fp) | set(fn)):
        p, r = _pr(tp[kind], fp[kind], fn[kind])
        print(f"| {kind} | {tp[kind] + fn[kind]} | {tp[kind]} | {fp[kind]} | {p:.2f} | {r:.2f} |")
    p, r = _pr(sum(tp.values()), sum(fp.values()), sum(fn.values()))
    total = sum(tp.values()) + sum(fn.values())
    print(f"| **all** | {total} | {sum(tp.values())} | {sum(fp.values())} | {p:.2f} | {r:.2f} |")


def injection_quality(use_model: bool) -> None:
    rows = _load("injection.jsonl")
    guard = InjectionGuard(0.6, "block")
    loads = ""
    if use_model:
        started = time.perf_counter()
        embedder = embedding.bundled()
        loaded = time.perf_counter()
        assert embedder is not None
        _corpus_vectors(embedder)
        done = time.perf_counter()
        loads = f"; model load {loaded - started:.2f} s, corpus embedding {done - loaded:.2f} s (once per process)"
    started = time.perf_counter()
    scored = [(row["label"] == "attack", guard.score(row["text"])) for row in rows]
    elapsed = time.perf_counter() - started
    method = scored[0][1]["method"]
    attacks = sum(1 for a, _ in scored if a)
    print(f"\nInjection detection, {attacks} attacks and {len(rows) - attacks} benign prompts; {method}")
    print(f"({len(rows)} prompts scored in {elapsed:.1f} s{loads})\n")
    print("| signal | threshold | precision | recall | false positives | missed attacks |")
    print("| --- | --- | --- | --- | --- | --- |")
    signals = [("heuristics only", "heuristic")]
    if use_model:
        signals.append(("heuristics + similarity", "score"))
    for label, key in signals:
        for threshold in (0.5, 0.6, 0.7, 0.8):
            tp = sum(1 for a, s in scored if a and s[key] >= threshold)
            fp = sum(1 for a, s in scored if not a and s[key] >= threshold)
            fn = attacks - tp
            p, r = _pr(tp, fp, fn)
            print(f"| {label} | {threshold} | {p:.2f} | {r:.2f} | {fp} | {fn} |")


def _catalog() -> Catalog:
    models = [
        {
            "name": f"m{i}",
            "deployments": [{"provider": "p", "model": f"m{i}"}],
            "context_window": 8192 * (i + 1),
            "pricing": {"input": str(i + 1), "output": str(2 * (i + 1))},
        }
        for i in range(8)
    ]
    config = parse_config({"providers": [{"name": "p", "base_url": "http://127.0.0.1:9/v1"}], "models": models})
    return Catalog(config)


async def _latency() -> None:
    env = Env(_catalog())
    cases: list[tuple[str, dict[str, Any]]] = [
        ("pii_redact", {"mode": "restore"}),
        ("secret_scan", {"action": "redact"}),
        ("injection_guard", {}),
        ("language", {}),
        ("spellcheck", {"language": "en"}),
        ("routing_policy", {"policy": "cheapest"}),
        ("json_validate", {}),
    ]
    raw = {"model": "m0", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": PROMPT}]}
    request = parse_request(ChatRequest, raw)
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": '{"reply": "Dear customer"}'}}]}

    async def never(*_: Any) -> Any:
        raise AssertionError("no retry expected")

    print("\nAdded latency per processor (in process, 90-word prompt; median and p95 of 50 runs after warm-up;")
    print(
        "'first use' is the first run in this process: what loads lazily, except the embedding model, loaded above)\n"
    )
    print("| processor | first use (loads) | median | p95 |")
    print("| --- | --- | --- | --- |")
    for name, options in cases:
        timings = []
        first = 0.0
        for i in range(51):
            processor = load_factory(name)(options, env)
            started = time.perf_counter()
            await processor.pre(Exchange(), request)
            await processor.post(Exchange(), json.loads(json.dumps(answer)), never)
            ms = (time.perf_counter() - started) * 1000
            if i == 0:
                first = ms
            else:
                timings.append(ms)
        timings.sort()
        p95 = timings[int(len(timings) * 0.95) - 1]
        print(f"| {name} | {first:.1f} ms | {statistics.median(timings):.2f} ms | {p95:.2f} ms |")


def http_latency(runs: int) -> None:
    """Each processor through the real gateway on a socket, in front of the tests' fake upstream (echoing)."""
    import httpx

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.fakes.openai_upstream import FakeOpenAI
    from tests.gateway_server import GatewayServer

    os.environ.setdefault("BENCH_FAKE_KEY", "sk-bench")
    fake = FakeOpenAI(os.environ["BENCH_FAKE_KEY"]).start()
    config = {
        "providers": [{"name": "fake", "base_url": fake.base_url, "api_key": "env:BENCH_FAKE_KEY"}],
        "models": [{"name": "m", "deployments": [{"provider": "fake", "model": "echo-tiny-m"}]}],
    }
    cases: list[tuple[str, list[Any]]] = [
        ("(none)", []),
        ("pii_redact", [{"name": "pii_redact", "mode": "restore"}]),
        ("secret_scan", ["secret_scan"]),
        ("injection_guard", ["injection_guard"]),
        ("language", ["language"]),
        ("spellcheck", [{"name": "spellcheck", "language": "en"}]),
        ("routing_policy", ["routing_policy"]),
        ("all of the above", ["pii_redact", "secret_scan", "injection_guard", "language", "spellcheck"]),
    ]
    print(f"\nThrough HTTP (gateway on a socket, fake upstream echoing; median of {runs} buffered requests)\n")
    print("| processors | client latency | added over none | timings.processors_ms |")
    print("| --- | --- | --- | --- |")
    try:
        with GatewayServer(config) as gateway, httpx.Client(headers=gateway.auth, timeout=60) as client:
            base = 0.0
            for label, processors in cases:
                body = {"model": "m", "messages": [{"role": "user", "content": PROMPT}], "processors": processors}
                latencies, reported = [], []
                for i in range(runs + 3):
                    started = time.perf_counter()
                    r = client.post(gateway.base_url + "/chat/completions", json=body)
                    ms = (time.perf_counter() - started) * 1000
                    r.raise_for_status()
                    if i >= 3:  # the first runs load what each processor loads lazily
                        latencies.append(ms)
                        reported.append(r.json()["timings"].get("processors_ms", 0.0))
                median = statistics.median(latencies)
                base = base or median
                added = "" if label == "(none)" else f"{median - base:+.2f} ms"
                print(f"| {label} | {median:.2f} ms | {added} | {statistics.median(reported):.2f} ms |")
    finally:
        fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-model", action="store_true", help="score injections without the embedding model")
    parser.add_argument("--http-runs", type=int, default=30, help="requests per case through HTTP (0: skip)")
    args = parser.parse_args()
    if args.no_model:
        embedding.bundled = lambda: None  # type: ignore[assignment]
    pii_quality()
    injection_quality(use_model=importlib.util.find_spec(embedding.BUNDLED_PACKAGE) is not None and not args.no_model)
    asyncio.run(_latency())
    if args.http_runs:
        http_latency(args.http_runs)


if __name__ == "__main__":
    main()
