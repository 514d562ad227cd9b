"""The data pages' query strings, read into typed values once (the usage page, its CSV, the request log).

A page's selection lives in its URL (so a view can be bookmarked, shared and exported as it is shown), and
every value is checked here before it reaches a store: a bad one is a `BadQuery` naming the field, which the
page answers as a 400 with the form and the message, never a database error. Times are UTC throughout: the
form's dates are UTC days, the rollups' buckets UTC hours and days.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from inferplex.errors import InvalidRequest

PRESETS = {"24h": 86_400, "7d": 7 * 86_400, "30d": 30 * 86_400}
MAX_SPAN_S = 400 * 86_400  # a range longer than this is refused: about a year of daily buckets
MAX_TEXT = 200  # the longest model name, key id or tag a filter may hold (the usage columns' width)
EARLIEST = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(2200, 1, 1, tzinfo=dt.UTC)


class BadQuery(ValueError):
    """A query parameter that cannot be read: the page answers 400 and names it."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param
        self.message = message

    def as_error(self) -> InvalidRequest:
        """As the console's error page shows a refusal (a 400 naming the parameter)."""
        return InvalidRequest(self.message, param=self.param)


def text(params: Mapping[str, str], name: str) -> str | None:
    """A free-text filter (a model, a key id, a tag): empty means unset. NUL is refused (PostgreSQL's text
    types cannot hold it), and so is anything longer than any stored value could be."""
    value = params.get(name, "").strip()
    if not value:
        return None
    if "\x00" in value or len(value) > MAX_TEXT:
        raise BadQuery(name, f"`{name}` must be at most {MAX_TEXT} characters, without NUL.")
    return value


def choice(params: Mapping[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = params.get(name, "").strip() or default
    if value not in allowed:
        raise BadQuery(name, f"`{name}` must be one of: {', '.join(allowed)}.")
    return value


def number(params: Mapping[str, str], name: str, *, lowest: float = 0.0) -> float | None:
    """A finite number at least `lowest`, or None when unset."""
    raw = params.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < lowest or value > 1e15:
        raise BadQuery(name, f"`{name}` must be a number of at least {lowest:g}.")
    return value


def usd_micros(params: Mapping[str, str], name: str) -> int | None:
    """A cost in USD as typed in the form (`0.25`), as integer micro-USD: money is never a float here."""
    raw = params.get(name, "").strip().lstrip("$")
    if not raw:
        return None
    try:
        value = Decimal(raw)
    except InvalidOperation:
        value = Decimal(-1)
    if not value.is_finite() or value < 0 or value > 10**9:
        raise BadQuery(name, f"`{name}` must be an amount in USD, e.g. 0.25.")
    return int(value * 1_000_000)


def integer(params: Mapping[str, str], name: str, default: int, lowest: int, highest: int) -> int:
    raw = params.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = lowest - 1
    if not lowest <= value <= highest:
        raise BadQuery(name, f"`{name}` must be an integer from {lowest} to {highest}.")
    return value


def _moment(raw: str, name: str, *, end: bool) -> float:
    """A form's date (`2026-11-27`, the whole UTC day: its start, or its end for `to`) or date and time
    (`2026-11-27T13:05`, as a datetime-local input sends it), as UNIX seconds."""
    try:
        if len(raw) == 10:
            day = dt.date.fromisoformat(raw)
            moment = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC) + dt.timedelta(days=1 if end else 0)
        else:
            moment = dt.datetime.fromisoformat(raw)
            moment = moment.replace(tzinfo=dt.UTC) if moment.tzinfo is None else moment.astimezone(dt.UTC)
    except (ValueError, OverflowError):
        raise BadQuery(
            name, f"`{name}` must be a date (YYYY-MM-DD) or a date and time (YYYY-MM-DDTHH:MM), UTC."
        ) from None
    if not EARLIEST <= moment <= LATEST:
        raise BadQuery(name, f"`{name}` must be between {EARLIEST.year} and {LATEST.year}.")
    return moment.timestamp()


@dataclass(frozen=True, slots=True)
class TimeRange:
    """[since, until) in UNIX seconds, and how it was asked for: a preset, or the form's from/to as typed
    (either may be empty: the preset's length before `to`, or up to now)."""

    since: float
    until: float
    preset: str | None
    start: str  # `from` as typed ("" with a preset)
    end: str  # `to` as typed

    @property
    def span(self) -> float:
        return self.until - self.since

    def params(self) -> dict[str, str]:
        """The query parameters that ask for this range again (a link, the CSV export)."""
        if self.preset is not None:
            return {"range": self.preset}
        return {k: v for k, v in (("from", self.start), ("to", self.end)) if v}


def time_range(params: Mapping[str, str], now: float, default: str) -> TimeRange:
    """`from`/`to` (either may be left empty: the preset's start, or now) or a preset `range`."""
    start_raw = params.get("from", "").strip()
    end_raw = params.get("to", "").strip()
    if start_raw or end_raw:
        preset = None
        until = _moment(end_raw, "to", end=True) if end_raw else now
        since = _moment(start_raw, "from", end=False) if start_raw else until - PRESETS[default]
    else:
        preset = choice(params, "range", tuple(PRESETS), default)
        until, since = now, now - PRESETS[preset]
    if since >= until:
        raise BadQuery("from", "`from` must be before `to`.")
    if until - since > MAX_SPAN_S:
        raise BadQuery("from", f"A range may span at most {MAX_SPAN_S // 86_400} days.")
    return TimeRange(since, until, preset, start_raw, end_raw)


def utc(moment: float | None, *, seconds: bool = True) -> str:
    """A moment as the pages show it: UTC, to the second (or the minute)."""
    if moment is None:
        return ""
    when = dt.datetime.fromtimestamp(moment, dt.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M") + " UTC"


def short(moment: float) -> str:
    """A moment in a table row: month, day and time to the second (UTC; the row's title has the year)."""
    return dt.datetime.fromtimestamp(moment, dt.UTC).strftime("%b %d %H:%M:%S")


def usd(micros: int | None) -> str:
    """Micro-USD as dollars, to the micro-dollar, trailing zeros dropped past the cents."""
    if micros is None:
        return ""
    dollars = Decimal(abs(int(micros))) / Decimal(1_000_000)
    shown = f"{dollars:.6f}".rstrip("0")
    whole, _, frac = shown.partition(".")
    return f"{'-' if micros < 0 else ''}${whole}.{frac.ljust(2, '0')}"


def ms(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,.0f} ms" if value >= 10 else f"{value:.1f} ms"
