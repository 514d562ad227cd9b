"""The limits a principal carries (its key's and its account's), worked out into the buckets and slots
the limit stores keep, once per key record rather than once per request.

Every rate limit is a rule in Inferada's published shape, `{metric, period, max, per_request}`: a key's
`rpm` is the rule (requests, minute, rpm) and its `tpm` the rule (tokens, minute, tpm), kept under their old
bucket names so a deploy keeps their state. A rule's window is the limit store's bucket (GCRA, limits/):
`max` per `period`, refilling continuously, so it rolls rather than resetting at a calendar edge. A token
rule is charged the gateway's estimate at admission and corrected at settlement to what the upstream
reported (`LimitPlan.corrections`), so a bucket ends up counting exactly what was used. A `per_request` rule
is no bucket: it caps one call's worst case, checked before anything is taken (`LimitPlan.over_cap`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inferplex.errors import RateLimited
from inferplex.limits import Rate

WINDOW_S = 60.0
# A rule's rolling window is kept in this many sub-windows (limits/__init__.py): room comes back at most
# 1/60 of the period late (one second of a minute, 24 minutes of a day, 12 hours of a month).
WINDOW_SLOTS = 60
INT64_MAX = 2**63 - 1

Metric = Literal[
    "tokens", "prompt_tokens", "completion_tokens", "requests", "audio_duration_seconds", "characters_synthesised"
]
Period = Literal["minute", "day", "week", "month"]
PERIODS: dict[str, float] = {"minute": 60.0, "day": 86_400.0, "week": 604_800.0, "month": 2_592_000.0}
# Inferada's audio metrics, each counted in one family unit (families/base.Unit): the seconds of audio a
# transcription or translation sends (its worst case, the file's measured duration), the characters a speech
# request reads; any other request counts 0 against them. Not corrected at settlement (worst = used).
AUDIO_METRICS = {"audio_duration_seconds": "seconds", "characters_synthesised": "characters"}
# Inferada's names for the levels, used in its 429 body (ours: model, account, key, user).
INFERADA_LEVEL = {"model": "model", "acct": "organisation", "key": "token", "user": "user"}


class LimitRule(BaseModel):
    """One of Inferada's rules, as an operator writes it (config, admin API, CLI)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: Metric
    period: Period
    max: int = Field(gt=0, le=INT64_MAX)
    per_request: bool = False


@dataclass(frozen=True, slots=True)
class Limits:
    rpm: int | None = None
    tpm: int | None = None
    max_concurrent: int | None = None
    rules: tuple[LimitRule, ...] = ()
    user_rules: tuple[LimitRule, ...] = ()  # a key's: applied to each end user its requests name


def rules_of(raw: Sequence[Any] | None) -> tuple[LimitRule, ...]:
    """Stored rules (JSON) as rules; they were validated when written."""
    return tuple(r if isinstance(r, LimitRule) else LimitRule.model_validate(r) for r in raw or ())


@dataclass(frozen=True, slots=True)
class Bucket:
    """One rate limit as the stores key it (`key:<id>:rpm`), and how a refusal names it."""

    key: str
    metric: str
    limit: int
    window_s: float
    what: str
    level: str  # model, acct, key, user
    rule: LimitRule
    legacy: bool = False  # `rpm`/`tpm`: a GCRA bucket as before rules, and tpm keeps its prompt estimate

    @property
    def slots(self) -> int:
        return 0 if self.legacy else WINDOW_SLOTS

    @property
    def tokens(self) -> bool:
        return self.metric != "requests"


@dataclass(frozen=True, slots=True)
class Cap:
    """A `per_request` rule: the most one call may use."""

    rule: LimitRule
    level: str
    what: str


def _what(level: str, rule: LimitRule) -> str:
    per = "per request" if rule.per_request else f"per {rule.period}"
    return f"{level}: {rule.max} {rule.metric.replace('_', ' ')} {per}"


def _scope_rules(name: str, lim: Limits) -> list[tuple[LimitRule, str]]:
    """A scope's rules with their bucket keys: `rpm` and `tpm` keep the names they had before rules (a
    deploy keeps their state), a rule's key says what it counts, so a changed rule starts a fresh bucket."""
    rules = []
    if lim.rpm:
        rules.append((LimitRule(metric="requests", period="minute", max=lim.rpm), f"{name}:rpm"))
    if lim.tpm:
        rules.append((LimitRule(metric="tokens", period="minute", max=lim.tpm), f"{name}:tpm"))  # see _add
    return rules + [(r, f"{name}:{r.metric}:{r.period}:{r.max}") for r in lim.rules]


def _add(buckets: list[Bucket], caps: list[Cap], level: str, rule: LimitRule, key: str) -> None:
    what = _what(level, rule)
    if rule.per_request:
        caps.append(Cap(rule, level, what))
    elif all(b.key != key for b in buckets):  # the same rule twice at one level is one limit
        legacy = key.endswith((":rpm", ":tpm"))
        buckets.append(Bucket(key, rule.metric, rule.max, PERIODS[rule.period], what, level, rule, legacy))


@dataclass(frozen=True, slots=True)
class LimitPlan:
    """Every bucket (key before account, then the model's and the end user's) and concurrency slot a
    principal's requests use, and the per-request caps."""

    buckets: tuple[Bucket, ...] = ()
    slots: tuple[tuple[str, int], ...] = ()  # (slot key, limit)
    caps: tuple[Cap, ...] = ()
    user_rules: tuple[tuple[str, LimitRule], ...] = ()  # (scope name, rule), bound per request to its user

    @classmethod
    def of(cls, scopes: Sequence[tuple[str, Limits]]) -> LimitPlan:
        """`scopes`: (`key:<id>` or `acct:<id>`, its limits)."""
        buckets: list[Bucket] = []
        caps: list[Cap] = []
        for name, lim in scopes:
            for rule, key in _scope_rules(name, lim):
                _add(buckets, caps, name.split(":")[0], rule, key)
        slots = tuple((f"{name}:conc", lim.max_concurrent) for name, lim in scopes if lim.max_concurrent)
        users = tuple((name, rule) for name, lim in scopes for rule in lim.user_rules)
        return cls(tuple(buckets), slots, tuple(caps), users)

    def for_request(self, model: str, model_rules: Sequence[LimitRule], user: str | None) -> LimitPlan:
        """This plan with the model's rules (counted across every caller of the model) and, when the request
        names an end user, the key's user rules counted for that user alone."""
        if not model_rules and not (user and self.user_rules):
            return self
        buckets, caps = list(self.buckets), list(self.caps)
        for rule in model_rules:
            _add(buckets, caps, "model", rule, f"model:{model}:{rule.metric}:{rule.period}:{rule.max}")
        if user:
            who = hashlib.sha256(user.encode()).hexdigest()[:24]  # bounded, and no caller text in a store key
            for name, rule in self.user_rules:
                _add(buckets, caps, "user", rule, f"{name}:user:{who}:{rule.metric}:{rule.period}:{rule.max}")
        return LimitPlan(tuple(buckets), self.slots, tuple(caps), self.user_rules)

    def over_cap(self, prompt: int, max_output: int, unit: str = "tokens") -> tuple[Cap, int] | None:
        """The first per-request cap this call's worst case (the prompt estimate plus the most it may
        generate) exceeds, with that worst case; None when every cap holds."""
        for cap in self.caps:
            worst = _amount(cap.rule.metric, prompt, max_output, unit)
            if worst > cap.rule.max:
                return cap, worst
        return None

    def rates(self, tokens: int, unit: str = "tokens") -> list[Rate]:
        """What admitting a request takes: one from each requests bucket, the prompt estimate from each
        tokens and prompt_tokens bucket, and one token from each completion_tokens bucket (so a full bucket
        refuses; the real count is charged at settlement)."""
        return [Rate(b.key, admitted(b.metric, tokens, unit), b.limit, b.window_s, b.slots) for b in self.buckets]

    def corrections(self, estimate: int, prompt: int, completion: int, age_s: float) -> list[Rate]:
        """What settling takes: each token rule's bucket moved from what admission charged it to the real
        usage (negative when the estimate was high; a failed call used nothing). Requests buckets keep their
        one, as rpm always has. `tpm` keeps counting as it did before rules: its prompt estimate stands and
        the output is added. `age_s`: seconds since admission, so a window's correction lands where its
        admission was counted."""
        out = []
        for b in self.buckets:
            if b.legacy and b.tokens:  # tpm as it always counted: the admitted estimate, then the output
                delta = completion
            elif b.tokens and b.metric not in AUDIO_METRICS:
                delta = _amount(b.metric, prompt, completion) - admitted(b.metric, estimate)
            else:
                continue
            if delta:
                out.append(Rate(b.key, delta, b.limit, b.window_s, b.slots, age_s))
        return out

    def refusal(
        self, index: int, wait: float, used: float, amount: int, *, request_id: str, model: str, scope: str
    ) -> LimitExceeded:
        """The 429 for bucket `index`, which holds `used` and admits `amount` in `wait` seconds."""
        b = self.buckets[index]
        current = round(used)
        return LimitExceeded(
            f"Rate limit reached for {b.what}. Try again in {wait:.1f}s.",
            retry_after=wait,
            detail=_detail(request_id, scope, model, b.level, b.rule, current, amount),
        )


def admitted(metric: str, prompt: int, unit: str = "tokens") -> int:
    if metric in AUDIO_METRICS:
        return prompt if AUDIO_METRICS[metric] == unit else 0
    if metric == "requests" or metric == "completion_tokens":
        return 1
    return prompt


def _amount(metric: str, prompt: int, completion: int, unit: str = "tokens") -> int:
    if metric in AUDIO_METRICS:
        return prompt if AUDIO_METRICS[metric] == unit else 0
    if metric == "requests":
        return 1
    if metric == "prompt_tokens":
        return prompt
    if metric == "completion_tokens":
        return completion
    return prompt + completion


def _detail(
    request_id: str, scope: str, model: str, level: str, rule: LimitRule, current: int, requested: int
) -> dict[str, Any]:
    return {
        "type": "limit_exceeded",
        "code": 429,
        "request_id": request_id,
        "scope": scope,
        "model_id": model,
        "level": INFERADA_LEVEL.get(level, level),
        "limit": rule.model_dump(),
        "current": current,
        "requested": requested,
    }


class LimitExceeded(RateLimited):
    """A refusal by a limit rule. `inferada` (set by the guard for a request carrying Inferada's extension)
    makes the OpenAI-shaped answer Inferada's own 429 body instead of OpenAI's error object."""

    def __init__(self, message: str, *, retry_after: float | None, detail: dict[str, Any]) -> None:
        super().__init__(message, retry_after=retry_after)
        self.detail = detail
        self.inferada = False

    def to_openai(self) -> dict[str, object]:
        return dict(self.detail) if self.inferada else super().to_openai()


def cap_refusal(cap: Cap, worst: int, *, request_id: str, model: str, scope: str) -> LimitExceeded:
    """A call bigger than a per-request cap: no wait would admit it, so no Retry-After."""
    return LimitExceeded(
        f"This request may use up to {worst} {cap.rule.metric.replace('_', ' ')}, more than the limit of "
        f"{cap.what}. Send a shorter prompt or a lower max_tokens.",
        retry_after=None,
        detail=_detail(request_id, scope, model, cap.level, cap.rule, 0, worst),
    )


NO_LIMITS = LimitPlan()
