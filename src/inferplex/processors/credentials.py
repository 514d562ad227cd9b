"""Credential detectors: cloud keys, tokens, private keys, passwords in assignments.

Each pattern is specific enough to be trusted alone (a fixed prefix and a known length or an armour line);
the one generic pattern (`password = ...`, `api_key: ...`) needs both a credential-like name and a value
that looks random, so ordinary prose about passwords is left alone. Shared by `secret_scan` and `pii_redact`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int
    kind: str
    value: str


_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "PRIVATE_KEY",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
            r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        ),
    ),
    ("AWS_ACCESS_KEY", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b")),
    (
        "AWS_SECRET_KEY",
        re.compile(r"(?i)(?<=aws_secret_access_key)[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"),
    ),
    ("GITHUB_TOKEN", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{60,255})\b")),
    ("ANTHROPIC_KEY", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}")),
    ("OPENAI_KEY", re.compile(r"\bsk-(?!ant-)(?:proj-|svcacct-)?[A-Za-z0-9_-]{20,}")),
    ("STRIPE_KEY", re.compile(r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b")),
    ("SLACK_TOKEN", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    ("GOOGLE_API_KEY", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("JWT", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\b")),
    ("BEARER_TOKEN", re.compile(r"(?i)(?<=bearer )[A-Za-z0-9._~+/-]{24,}=*")),
    (
        "CONNECTION_STRING",
        re.compile(r"\b[a-z][a-z0-9+]{2,}://[^\s:/@]+:([^\s@/]{4,})@[^\s/]+"),
    ),
)

_ASSIGNMENT = re.compile(
    r"(?i)\b(?:password|passwd|pwd|secret|api[_-]?key|apikey|access[_-]?token|auth[_-]?token|client[_-]?secret)"
    r"[\"']?\s*[:=]\s*[\"']?([^\s\"',;]{8,})"
)


def _entropy(value: str) -> float:
    counts = Counter(value)
    return -sum(c / len(value) * math.log2(c / len(value)) for c in counts.values())


def _looks_random(value: str) -> bool:
    classes = sum(bool(re.search(p, value)) for p in (r"[a-z]", r"[A-Z]", r"\d", r"[^A-Za-z0-9]"))
    return classes >= 2 and _entropy(value) >= 2.5


def find_credentials(text: str) -> list[Span]:
    spans: list[Span] = []
    for kind, pattern in _PATTERNS:
        for m in pattern.finditer(text):
            # Patterns with a group mark only the secret part (the value, the password in a URL).
            start, end = (m.start(1), m.end(1)) if pattern.groups else (m.start(), m.end())
            spans.append(Span(start, end, kind, text[start:end]))
    for m in _ASSIGNMENT.finditer(text):
        if _looks_random(m.group(1)):
            spans.append(Span(m.start(1), m.end(1), "PASSWORD", m.group(1)))
    return spans


def resolve_overlaps(spans: list[Span]) -> list[Span]:
    """Keep the earliest, then longest, span wherever two overlap; return them in text order."""
    out: list[Span] = []
    for span in sorted(spans, key=lambda s: (s.start, -(s.end - s.start))):
        if out and span.start < out[-1].end:
            continue
        out.append(span)
    return out


def replace_spans(text: str, spans: list[Span], placeholder: Callable[[str, str], str]) -> str:
    """`text` with each (non-overlapping, ordered) span replaced by `placeholder(kind, value)`."""
    parts: list[str] = []
    at = 0
    for s in spans:
        parts.append(text[at : s.start])
        parts.append(placeholder(s.kind, s.value))
        at = s.end
    parts.append(text[at:])
    return "".join(parts)
