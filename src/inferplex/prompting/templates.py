"""Prompt templates: a model's default system prompt and callers' system messages, rendered in a sandbox.

Inferada renders system text per model (`template_render_mode`): `off` leaves it literal, `vars` substitutes
`{{ variable }}` and nothing else, `logic` allows conditionals and loops, in the operator's default prompt
only. Both run on jinja2's `ImmutableSandboxedEnvironment`, because neither side is trusted: a caller's text
obviously not, and Inferada's operators write templates for a hosted service, so `{{ ''.__class__ }}` must
not reach Python objects whoever wrote it (the sandbox refuses such access with a `SecurityError`, which is
reported here as a template problem). `vars` is stricter than the sandbox: its syntax tree may hold only
literal text and variable names, so a caller cannot run a loop or call anything at all.

Variables are strings, all in UTC, grouped by how often they change so a prompt's prefix stays cacheable
upstream (Inferada publishes the grouping and the first three names; the rest is inferred):
- stable, at most once a day: `now_date` (2026-11-26), `now_day_of_week` (Thursday), `now_year` (2026);
- volatile, once a minute: `now_time` (14:05).
A template that uses only stable ones renders the same text all day. Unknown names are refused: an
operator's when the config is checked, a caller's with a 400.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from jinja2 import StrictUndefined, Template, TemplateSyntaxError, meta, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

Mode = Literal["off", "vars", "logic"]

STABLE = ("now_date", "now_day_of_week", "now_year")
VOLATILE = ("now_time",)
VARIABLES = STABLE + VOLATILE

_DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
# Caller texts up to this size keep their compiled template and rendering between requests (a client
# sends the same system prompt every time); longer ones are compiled each time, so the caches stay small.
_CACHE_CHARS = 8192


class TemplateProblem(ValueError):
    """A template that cannot be rendered: bad syntax, a construct its mode does not allow, an unknown
    variable, or the sandbox refusing what it tried. The message says which, and where."""


def _environment() -> ImmutableSandboxedEnvironment:
    """The one sandbox. Its globals are cut to what a loop needs: jinja's `lipsum`, `cycler` and `joiner`
    are objects a prompt has no use for, and every global is one more thing to reach through."""
    env = ImmutableSandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    env.globals = {name: env.globals[name] for name in ("range", "dict", "namespace")}
    return env


_ENV = _environment()


def variables(now: datetime) -> dict[str, str]:
    """The template variables at `now` (UTC)."""
    now = now.astimezone(UTC)
    return {
        "now_date": now.strftime("%Y-%m-%d"),
        "now_day_of_week": _DAYS[now.weekday()],
        "now_year": str(now.year),
        "now_time": now.strftime("%H:%M"),
    }


@functools.lru_cache(maxsize=1)
def _at_minute(minute: int) -> Mapping[str, str]:
    return variables(datetime.fromtimestamp(minute * 60, UTC))


def variables_now() -> Mapping[str, str]:
    """The variables now, worked out once a minute (every request of that minute shares them)."""
    return _at_minute(int(time.time() // 60))


@dataclass(frozen=True, slots=True, eq=False)
class Compiled:
    template: Template
    names: tuple[str, ...]  # the variables it reads: all its rendering depends on


def _only_variables(tree: nodes.Node) -> None:
    """`vars` mode: literal text and `{{ name }}` only. Anything else (a filter, an attribute, a call, a
    block) is refused before it can run, so the caller's text never reaches an expression evaluator."""
    for node in tree.iter_child_nodes():
        if not isinstance(node, nodes.Output | nodes.TemplateData | nodes.Name):
            kind = type(node).__name__.lower()
            raise TemplateProblem(
                f"line {node.lineno}: only {{{{ variable }}}} substitution is allowed here, not `{kind}`"
            )
        if isinstance(node, nodes.Name) and node.name not in VARIABLES:  # a global such as `range` too
            raise TemplateProblem(f"unknown variable {node.name!r} (known: {', '.join(VARIABLES)})")
        _only_variables(node)


def compile_template(text: str, mode: Mode) -> Compiled:
    """Parse `text` for `mode` (`vars` or `logic`), refusing bad syntax, what the mode forbids and unknown
    variables, all before anything is rendered."""
    try:
        tree = _ENV.parse(text)
    except TemplateSyntaxError as exc:
        raise TemplateProblem(f"line {exc.lineno}: {exc.message}") from None
    if mode != "logic":
        _only_variables(tree)
    names = meta.find_undeclared_variables(tree)  # the sandbox's globals (`range`...) are not counted
    unknown = sorted(names - set(VARIABLES))
    if unknown:
        raise TemplateProblem(f"unknown variable {unknown[0]!r} (known: {', '.join(VARIABLES)})")
    return Compiled(_ENV.from_string(tree), tuple(sorted(names)))


def _render(compiled: Compiled, values: Mapping[str, str]) -> str:
    try:
        return compiled.template.render({name: values[name] for name in compiled.names})
    except Exception as exc:  # the sandbox's SecurityError, or any error of the template's own expressions
        raise TemplateProblem(f"{type(exc).__name__}: {exc}") from None


@functools.lru_cache(maxsize=256)
def _compiled(text: str, mode: Mode) -> Compiled:
    return compile_template(text, mode)


@functools.lru_cache(maxsize=256)
def _rendered(text: str, mode: Mode, values: tuple[str, ...]) -> str:
    compiled = _compiled(text, mode)
    return _render(compiled, dict(zip(compiled.names, values, strict=True)))


def render(text: str, mode: Mode, values: Mapping[str, str]) -> str:
    """`text` rendered in `mode` with `values`; text without a brace cannot hold a tag and is returned as
    it is. The result is kept per text and per value of the variables it reads."""
    if mode == "off" or "{" not in text:
        return text
    if len(text) > _CACHE_CHARS:
        return _render(compile_template(text, mode), values)
    compiled = _compiled(text, mode)
    return _rendered(text, mode, tuple(values[name] for name in compiled.names))


def check_template(text: str, mode: Mode) -> None:
    """An operator's prompt, checked once when the config is loaded (`inferplex config check`, start-up):
    compiled, then rendered for each day of a week, so a template that fails only on some days (a branch
    on `now_day_of_week`) is refused there rather than on a caller's request."""
    if mode == "off":
        return
    compiled = compile_template(text, mode)
    start = datetime.now(UTC)
    for day in range(7):
        _render(compiled, variables(start + timedelta(days=day)))
