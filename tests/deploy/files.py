"""Reading the deployment files the way their tools do: the Dockerfile's instructions, .dockerignore's patterns,
the Makefile's variables, HAProxy's timings. Small parsers, so the tests can compare what each file says with
the others (a version, a port, a path, a timing) instead of trusting that they agree."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
CHART = DEPLOY / "helm" / "inferplex"


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments and parser directives dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = pending + line
        pending = ""
        word, _, rest = whole.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def copy_sources(path: Path = DOCKERFILE) -> list[str]:
    """What COPY takes from the build context (not `COPY --from=stage`)."""
    sources: list[str] = []
    for word, rest in instructions(path):
        if word != "COPY":
            continue
        args = shlex.split(rest)
        if any(a.startswith("--from") for a in args):
            continue
        sources += [a for a in args if not a.startswith("--")][:-1]
    return sources


def build_args(path: Path = DOCKERFILE) -> dict[str, str]:
    args: dict[str, str] = {}
    for word, rest in instructions(path):
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args[name] = shlex.split(value)[0] if value else ""
    return args


def make_variables(path: Path = REPO / "Makefile") -> dict[str, str]:
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Z_]+)\s*[:?]?=\s*(.*)$", line)
        if m:
            found[m.group(1)] = m.group(2).strip()
    return found


def _pattern(glob: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match plus `**`) as a regular expression over a relative path."""
    out = ""
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif glob.startswith("**", i):
            out += ".*"
            i += 2
        elif glob[i] == "*":
            out += "[^/]*"
            i += 1
        elif glob[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(glob[i])
            i += 1
    return re.compile(out + r"\Z")


def dockerignore(path: Path = REPO / ".dockerignore") -> list[tuple[bool, re.Pattern[str]]]:
    rules: list[tuple[bool, re.Pattern[str]]] = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        rules.append((keep, _pattern(line.lstrip("!").strip("/"))))
    return rules


def sent_to_builder(relative: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether the build context holds this path: the last pattern matching it or one of its parents wins
    (Docker's patternmatcher), and a path no pattern matches is sent."""
    parts = relative.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    sent = True
    for keep, pattern in rules:
        if any(pattern.match(c) for c in candidates):
            sent = keep
    return sent


def seconds(text: str) -> float:
    """`40s`, `1m30s`, `500ms` (compose's and HAProxy's durations) in seconds."""
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text):
        total += float(number) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    return total


def haproxy_mark_down_s(cfg: str) -> float:
    """How long HAProxy's health checks take to mark a replica down once it answers 503: `fall` failed checks
    `inter` apart, plus up to one `inter` before the first of them."""
    line = next(x for x in cfg.splitlines() if x.strip().startswith("default-server"))
    inter = seconds(re.search(r"\binter (\S+)", line).group(1))  # type: ignore[union-attr]
    fall = int(re.search(r"\bfall (\d+)", line).group(1))  # type: ignore[union-attr]
    return fall * inter + inter
