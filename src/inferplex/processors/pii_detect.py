"""PII detectors: pure functions from text to spans, each validated beyond its pattern where a check exists.

- EMAIL: RFC 5322's common subset.
- PHONE: Google's libphonenumber (`phonenumbers`), valid numbers only, for the given default region.
- CARD: 13-19 digits (spaces or dashes allowed) passing the Luhn check.
- IBAN: the ISO 13616 checksum (`python-stdnum`).
- NATIONAL_ID: US SSN, Spanish DNI/NIE, Italian codice fiscale, French NIR, Indian Aadhaar, Dutch BSN,
  German tax id, UK NHS number: each a pattern plus its `python-stdnum` check digit validation.
- IP_ADDRESS: IPv4 and IPv6, validated by `ipaddress`.
- credentials: see `credentials.py`.
- ADDRESS: a street address heuristic (number, name, street type: "221B Baker Street", "12 rue de la Paix").
- NAME: a heuristic on cues ("Mr. Smith", "my name is Ana Lopez", "Name: ..."). There is no name finder that
  ships its weights offline here without a heavy NLP stack, so names without such a cue are not found:
  this is measured in docs/benchmarks.md, not hidden.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

import phonenumbers
from stdnum import iban, luhn
from stdnum.de import idnr
from stdnum.es import dni, nie
from stdnum.fr import nir
from stdnum.gb import nhs
from stdnum.in_ import aadhaar
from stdnum.it import codicefiscale
from stdnum.nl import bsn
from stdnum.us import ssn

from inferplex.processors.credentials import Span, find_credentials, resolve_overlaps

ALL_KINDS = frozenset({"EMAIL", "PHONE", "CARD", "IBAN", "NATIONAL_ID", "IP_ADDRESS", "CREDENTIAL", "ADDRESS", "NAME"})

_EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_IPV4 = re.compile(r"(?<!\d)(?<!\d\.)(?:\d{1,3}\.){3}\d{1,3}(?!\.?\d)")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")

_IDS: tuple[tuple[re.Pattern[str], Callable[[str], bool]], ...] = (
    (re.compile(r"\b\d{3}-\d{2}-\d{4}\b"), ssn.is_valid),
    (re.compile(r"\b\d{8}-?[A-Z]\b"), dni.is_valid),
    (re.compile(r"\b[XYZ]-?\d{7}-?[A-Z]\b"), nie.is_valid),
    (re.compile(r"\b[A-Z]{6}\d{2}[A-Z]\d{2}[A-Z]\d{3}[A-Z]\b"), codicefiscale.is_valid),
    (re.compile(r"\b[12] ?\d{2} ?\d{2} ?\d{2} ?\d{3} ?\d{3} ?\d{2}\b"), nir.is_valid),
    (re.compile(r"\b[2-9]\d{3} ?\d{4} ?\d{4}\b"), aadhaar.is_valid),
    (re.compile(r"\b\d{3} ?\d{3} ?\d{4}\b"), nhs.is_valid),
    (re.compile(r"\b\d{9}\b"), bsn.is_valid),
    (re.compile(r"\b\d{2} ?\d{3} ?\d{3} ?\d{3}\b"), idnr.is_valid),
)

_STREET_TYPES = (
    "Street|St|Avenue|Ave|Road|Rd|Boulevard|Blvd|Lane|Ln|Drive|Dr|Court|Ct|Way|Place|Pl|Square|Sq|Terrace|"
    "Parkway|Pkwy|Highway|Hwy|Close|Crescent|Gardens"
)
_ADDRESS = re.compile(
    rf"\b\d{{1,5}}[A-Za-z]?,? (?:[A-Z][a-z]+ ){{1,3}}(?:{_STREET_TYPES})\b"
    r"|\b\d{1,4},? (?:rue|avenue|boulevard|place|chemin|calle|avenida|via|piazza|viale) (?:[A-Za-z'][\w'-]* ?){1,4}"
    r"|\b(?:[A-Z][a-zäöüß]+)(?:straße|strasse|weg|gasse|platz|allee) \d{1,4}[a-z]?\b"
)
_NAME_WORD = r"[A-Z][a-z]+(?:[-'][A-Z][a-z]+)?"
_NAME = re.compile(
    rf"\b(?:Mr|Mrs|Ms|Miss|Mx|Dr|Prof|Sir|Madam)\.? ((?:{_NAME_WORD} ?){{1,3}})"
    r"|(?i:my name is|my name's|i am called|signed|regards,|name:|patient:|customer:) ?"
    rf"((?-i:{_NAME_WORD})(?: (?-i:{_NAME_WORD})){{0,2}})"
)


def _emails(text: str) -> list[Span]:
    return [Span(m.start(), m.end(), "EMAIL", m.group()) for m in _EMAIL.finditer(text)]


def _phones(text: str, region: str) -> list[Span]:
    spans = []
    for m in phonenumbers.PhoneNumberMatcher(text, region, leniency=phonenumbers.Leniency.VALID):
        spans.append(Span(m.start, m.end, "PHONE", m.raw_string))
    return spans


def _cards(text: str) -> list[Span]:
    out = []
    for m in _CARD.finditer(text):
        digits = re.sub(r"\D", "", m.group())
        if 13 <= len(digits) <= 19 and luhn.is_valid(digits) and len(set(digits)) > 1:
            out.append(Span(m.start(), m.end(), "CARD", m.group()))
    return out


def _ibans(text: str) -> list[Span]:
    out = []
    for m in _IBAN.finditer(text):
        value = m.group().rstrip()
        if iban.is_valid(value):
            out.append(Span(m.start(), m.start() + len(value), "IBAN", value))
    return out


def _national_ids(text: str) -> list[Span]:
    out = []
    for pattern, valid in _IDS:
        for m in pattern.finditer(text):
            if valid(m.group()):
                out.append(Span(m.start(), m.end(), "NATIONAL_ID", m.group()))
    return out


def _ips(text: str) -> list[Span]:
    out = []
    for pattern in (_IPV4, _IPV6):
        for m in pattern.finditer(text):
            try:
                ipaddress.ip_address(m.group())
            except ValueError:
                continue
            out.append(Span(m.start(), m.end(), "IP_ADDRESS", m.group()))
    return out


def _addresses(text: str) -> list[Span]:
    return [Span(m.start(), m.end(), "ADDRESS", m.group().rstrip()) for m in _ADDRESS.finditer(text)]


def _names(text: str) -> list[Span]:
    out = []
    for m in _NAME.finditer(text):
        group = 1 if m.group(1) else 2
        value = m.group(group).rstrip()
        out.append(Span(m.start(group), m.start(group) + len(value), "NAME", value))
    return out


def find_pii(text: str, kinds: frozenset[str] = ALL_KINDS, region: str = "US") -> list[Span]:
    """Every PII span of the wanted kinds, overlaps resolved (earliest, then longest, wins), in text order."""
    spans: list[Span] = []
    if "CREDENTIAL" in kinds:
        spans += [Span(s.start, s.end, "CREDENTIAL", s.value) for s in find_credentials(text)]
    if "EMAIL" in kinds:
        spans += _emails(text)
    if "CARD" in kinds:
        spans += _cards(text)
    if "IBAN" in kinds:
        spans += _ibans(text)
    if "NATIONAL_ID" in kinds:
        spans += _national_ids(text)
    if "IP_ADDRESS" in kinds:
        spans += _ips(text)
    if "PHONE" in kinds:
        spans += _phones(text, region)
    if "ADDRESS" in kinds:
        spans += _addresses(text)
    if "NAME" in kinds:
        spans += _names(text)
    return resolve_overlaps(spans)
