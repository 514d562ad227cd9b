"""`injection_guard`: score prompt-injection and jailbreak attempts and refuse those above a threshold.

Inferada publishes the same processor as `prompt_shield`: both names build it, and each reports under its own.

Two signals, the score being the larger:
- heuristics: weighted patterns for the phrasings attacks share (override earlier instructions, reveal the
  system prompt, unrestricted personas, fake role markers), combined as independent evidence;
- similarity: the highest cosine similarity between the prompt's sentences and a corpus of known attacks
  (`data/injection_corpus.txt`), embedded with the bundled all-MiniLM-L6-v2, mapped linearly from
  [SIM_LOW, SIM_HIGH] to [0, 1]. Without the bundled model the guard runs on heuristics alone and says so.

The user, tool and function messages are scored (indirect injections arrive in tool results and pasted
documents); system and developer messages are the operator's and are not. Options: `threshold` (0-1,
default 0.6: see docs/benchmarks.md for precision and recall at each threshold) and `action` (`block`, or
`flag` to only report the score).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from functools import cache
from importlib.resources import files
from typing import Any

from inferplex.canonical import ChatRequest
from inferplex.errors import ProcessorRejected
from inferplex.gateway_request import GatewayRequest
from inferplex.processors import embedding
from inferplex.processors.base import Env, Exchange, Step, check_options, choice, number
from inferplex.processors.text import texts

SIM_LOW, SIM_HIGH = 0.35, 0.70
DEFAULT_THRESHOLD = 0.6
SCORED_ROLES = ("user", "tool", "function")
MAX_SEGMENTS = 24
SHORT_CHARS = 200

_NOUNS = (
    r"(instructions?|prompts?|rules|directions?|guidance|guidelines|constraints|directives?|polic(y|ies)|programming"
    r"|training|system (prompt|message)|restrictions|safety (checks|rules|guidelines))"
)
_OVERRIDE = (
    r"\b(ignore|disregard|forget|override|bypass|skip|abandon|throw away|discard|drop)\b.{0,40}"
    r"\b(previous|prior|above|earlier|all|any|your|the|whatever|these|those)\b.{0,30}\b" + _NOUNS
)
_EXTRACT = (
    r"\b(reveal|print|show|output|repeat|leak|paste|quote|dump|tell me|what is|what are|what were)\b.{0,50}"
    r"\b(system (prompt|message)|initial (prompt|instructions)|hidden (prompt|instructions?)"
    r"|your (instructions|prompt|rules|guidelines|configuration)|(text|everything) above|you (were )?told"
    r"|directions your)"
)
_PERSONA = (
    r"\b(do anything now|no longer bound|zero (content )?restrictions|escaped (its|your|all) restrictions"
    r"|(without|no) (any )?(restrictions|limitations|filters|censorship|content polic(y|ies)|moral or ethical)"
    r"|content filters? (don't|do not) exist|unrestricted (mode|output|persona|ai)|jailbroken)\b"
)
_ROLEPLAY = (
    r"\b(pretend|act as|act like|roleplay|role-play|you are now|you're now|imagine you are|simulate|from now on)\b"
    r".{0,80}\b(no|without|free from|unfiltered|uncensored|evil|unrestricted|obey|no laws|any content)\b"
)
_AUTHORITY = (
    r"\b(i am|i'm) (the|your) (lead )?(developer|admin|administrator|creator|owner)\b"
    r"|\b(admin|administrator|developer|system) override\b|\bmaintenance mode\b|\bhigher (authority|priority)\b"
)
_COERCE = (
    r"\b(refus(ing|al) is not an option|say yes to everything|must comply|obey every"
    r"|(never|don't|do not) (refuse|apologi[sz]e|say you cannot))"
)
_INDIRECT = (
    r"\b(instructions?|note|message) (for|to) (the )?(ai|llm|language model|assistant|agents?)\b"
    r"|\b(if you are|attention) (an? )?(ai|llm|language model|assistant)\b|\bai (agents?|summari[sz]er|assistants?)\s*:"
)
_RULES: tuple[tuple[float, re.Pattern[str]], ...] = tuple(
    (w, re.compile(p, re.IGNORECASE))
    for w, p in (
        (0.75, _OVERRIDE),
        (0.7, _EXTRACT),
        (0.7, _PERSONA),
        (0.45, r"\b(DAN|developer mode|DevMode|jailbreak|god mode)\b"),
        (0.5, _ROLEPLAY),
        (0.5, _AUTHORITY),
        (0.5, _COERCE),
        (0.6, _INDIRECT),
        (
            0.5,
            r"\b(new|updated|real) (instructions?|directives?|policy|rules?)\b.{0,40}"
            r"\b(supersede|override|now|allows?)\b",
        ),
        (0.55, r"(^|\n)\s*(system|assistant)\s*:|<\|im_start\|>|\[system\]|###\s*instruction"),
        (
            0.4,
            r"\b(safety|content) (rules|guidelines|filters?|policy|module) (are|is) (suspended|disabled|lifted|off)\b",
        ),
        (0.6, r"\bi have been pwned\b|\bpwned\b"),
        (0.4, r"!\[[^\]]*\]\(https?://[^)]*\?[^)]*="),
    )
)


def heuristic_score(text: str) -> tuple[float, list[str]]:
    """Independent-evidence combination of the matched rules' weights, and which rules matched."""
    miss = 1.0
    hits = []
    for i, (weight, pattern) in enumerate(_RULES):
        if pattern.search(text):
            miss *= 1 - weight
            hits.append(f"rule_{i + 1}")
    return 1 - miss, hits


def segments(text: str) -> list[str]:
    """Sentences of a text, and the whole text when it is short, so that a many-sentence attack is seen whole."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if len(s.strip()) > 3]
    out = sentences[-MAX_SEGMENTS:]  # a long conversation: the newest sentences matter most
    if len(sentences) > 1 and len(text) < 600:
        out.append(text.strip())
    return out


@cache
def corpus() -> tuple[str, ...]:
    raw = files("inferplex.processors").joinpath("data/injection_corpus.txt").read_text(encoding="utf-8")
    return tuple(line.strip() for line in raw.splitlines() if line.strip() and not line.startswith("#"))


_VECTORS: dict[str, Any] = {}


def _corpus_vectors(embedder: embedding.Embedder) -> Any:
    """The corpus embedded once per encoder (by name) and kept for the life of the process."""
    found = _VECTORS.get(embedder.name)
    if found is None:
        found = _VECTORS[embedder.name] = embedder.encode(list(corpus()))
    return found


def similarity(embedder: embedding.Embedder, parts: list[str]) -> float:
    """The highest cosine similarity between any part and any known attack (vectors are unit length)."""
    if not parts:
        return 0.0
    known = _corpus_vectors(embedder)
    # Encoded in two batches by length: one batch pads every sentence to the longest part, which costs
    # three times as much as the two batches together.
    short = [p for p in parts if len(p) <= SHORT_CHARS]
    long = [p for p in parts if len(p) > SHORT_CHARS]
    return max(float((embedder.encode(group) @ known.T).max()) for group in (short, long) if group)


def similarity_score(cosine: float) -> float:
    return min(max((cosine - SIM_LOW) / (SIM_HIGH - SIM_LOW), 0.0), 1.0)


class InjectionGuard(Step):
    name = "injection_guard"
    order = 50

    def __init__(self, threshold: float, action: str, name: str = "injection_guard") -> None:
        super().__init__()
        self.name = name
        self.threshold = threshold
        self.action = action

    def score(self, text: str) -> dict[str, Any]:
        heuristic, hits = heuristic_score(text)
        out: dict[str, Any] = {"heuristic": round(heuristic, 3), "rules": hits}
        embedder = embedding.bundled()
        if embedder is None:
            out["similarity"] = None
            out["method"] = "heuristics only (the bundled embedding model is not installed)"
            out["score"] = round(heuristic, 3)
            return out
        cosine = similarity(embedder, segments(text))
        out["similarity"] = round(cosine, 3)
        out["method"] = f"heuristics + similarity ({embedder.name}, {len(corpus())} known attacks)"
        out["score"] = round(max(heuristic, similarity_score(cosine)), 3)
        return out

    async def pre(self, ex: Exchange, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]:
        text = "\n".join(t for t in texts(request.body, SCORED_ROLES) if t)
        result = await asyncio.to_thread(self.score, text)
        flagged = result["score"] >= self.threshold
        self.metadata.update(result, threshold=self.threshold, flagged=flagged, action=self.action)
        if flagged and self.action == "block":
            raise ProcessorRejected(
                f"Processor `{self.name}` rejected the request: prompt-injection score {result['score']} "
                f"is at or above the threshold {self.threshold}.",
                param="messages",
            )
        return request


def create(options: Mapping[str, Any], env: Env, name: str = "injection_guard") -> InjectionGuard:
    check_options(name, options, {"threshold", "action"})
    threshold = number(name, options, "threshold", DEFAULT_THRESHOLD, 0.0, 1.0)
    return InjectionGuard(threshold, choice(name, options, "action", ("block", "flag")), name)


def create_prompt_shield(options: Mapping[str, Any], env: Env) -> InjectionGuard:
    return create(options, env, "prompt_shield")
