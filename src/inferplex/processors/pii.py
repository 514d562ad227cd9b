"""`pii_redact` and Inferada's `anonymise`: replace personal data with stable placeholders before the model sees
the prompt.

`anonymise` is `pii_redact` in `restore` mode that also needs the request's language (as Inferada publishes
it): the language gives the default country of phone numbers written without `+` (`nl` reads `06 ...` as
Dutch; `nl-BE` as Belgian), where `pii_redact` takes the `region` option.

Options: `mode` (`mask`, the default, leaves the answer as the model wrote it; `restore` puts the originals
back into the answer, streams included), `kinds` (a subset of the detector kinds) and `region` (the default
country for phone numbers written without a `+` prefix). Metadata counts what was found per kind and how many
placeholders were restored; the values themselves are never reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Mapping
from typing import Any

from inferplex.canonical import ChatRequest
from inferplex.errors import InvalidRequest, UnsupportedLanguage
from inferplex.gateway_request import GatewayRequest
from inferplex.processors.base import Again, Env, Exchange, Step, check_options, choice
from inferplex.processors.credentials import replace_spans
from inferplex.processors.pii_detect import ALL_KINDS, find_pii
from inferplex.processors.placeholders import Restorer, Vault
from inferplex.processors.text import map_answer, rewrite
from inferplex.responses import ChatCompletion, ChatCompletionChunk, ChunkChoice

# The languages `anonymise` accepts, and the country each reads national phone numbers as.
REGIONS = {"en": "US", "nl": "NL", "de": "DE", "fr": "FR", "es": "ES", "it": "IT", "pt": "PT"}


def region_of(language: str) -> str:
    """The phone region of a language tag (`nl` -> NL, `nl-BE` -> BE), or a 422 naming an unsupported one."""
    primary, _, country = language.replace("_", "-").partition("-")
    if primary not in REGIONS:
        raise UnsupportedLanguage(
            f"Processor `anonymise` does not support the language `{language}` "
            f"(supported: {', '.join(sorted(REGIONS))}).",
            param="language",
        )
    return country.upper() if len(country) == 2 else REGIONS[primary]


# The system-prompt segment of a restoring redaction: the originals can be put back only where the model
# wrote a placeholder exactly as it received it.
KEEP_PLACEHOLDERS = (
    "Some personal data in this conversation was replaced by placeholders in square brackets, such as "
    "[EMAIL_1] or [NAME_1]. Where you refer to that data, write its placeholder exactly as it appears."
)


class PiiRedact(Step):
    name = "pii_redact"
    order = 40

    def __init__(self, mode: str, kinds: frozenset[str], region: str, needs_language: bool = False) -> None:
        super().__init__()
        if needs_language:
            self.name = "anonymise"
        self.needs_language = needs_language
        self.mode = mode
        self.kinds = kinds
        self.region = region
        self.vault = Vault()
        self.found: Counter[str] = Counter()

    def redact(self, text: str) -> str:
        spans = find_pii(text, self.kinds, self.region)
        self.found.update(s.kind for s in spans)
        return replace_spans(text, spans, self.vault.placeholder)

    async def pre(self, ex: Exchange, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]:
        if self.needs_language:
            if ex.language is None:
                raise UnsupportedLanguage(
                    "Processor `anonymise` needs the request's language: set `inferada.language`, or run the "
                    "`language` processor before it.",
                    param="language",
                    code="language_required",
                )
            self.region = region_of(ex.language)
            self.metadata["language"] = ex.language
        request = rewrite(request, self.redact)
        if self.mode == "restore" and self.found:
            ex.segments.append(KEEP_PLACEHOLDERS)
        self.metadata.update(
            mode=self.mode, redacted=sum(self.found.values()), entities=dict(sorted(self.found.items()))
        )
        if "NAME" in self.kinds:
            self.metadata["names"] = "cue-based heuristic (no offline NER model installed)"
        return request

    async def post(self, ex: Exchange, response: ChatCompletion, again: Again) -> ChatCompletion:
        if self.mode != "restore":
            return response
        restored = 0

        def put_back(text: str) -> str:
            nonlocal restored
            out, n = self.vault.restore(text)
            restored += n
            return out

        map_answer(response, put_back)
        self.metadata["restored"] = restored
        return response

    def stream(self, ex: Exchange, chunks: AsyncIterator[ChatCompletionChunk]) -> AsyncIterator[ChatCompletionChunk]:
        if self.mode != "restore":
            return chunks
        return self._restore_stream(chunks)

    async def _restore_stream(self, chunks: AsyncIterator[ChatCompletionChunk]) -> AsyncIterator[ChatCompletionChunk]:
        restorers: dict[int, Restorer] = {}
        last: ChatCompletionChunk | None = None
        async for chunk in chunks:
            last = chunk
            for c in chunk.get("choices") or ():
                r = restorers.setdefault(c.get("index", 0), Restorer(self.vault))
                delta = c.get("delta") or {}
                text = delta.get("content")
                out = r.feed(text) if isinstance(text, str) else ""
                if c.get("finish_reason"):
                    out += r.flush()
                if isinstance(text, str) or out:
                    delta["content"] = out
                    c["delta"] = delta
            self.metadata["restored"] = sum(r.restored for r in restorers.values())
            yield chunk
        leftovers = {i: r.flush() for i, r in restorers.items() if r.pending}
        if leftovers and last is not None:
            self.metadata["restored"] = sum(r.restored for r in restorers.values())
            choices: list[ChunkChoice] = [
                {"index": i, "delta": {"content": t}, "finish_reason": None} for i, t in leftovers.items()
            ]
            tail = _identity(last)
            tail["choices"] = choices
            yield tail


def _identity(chunk: ChatCompletionChunk) -> ChatCompletionChunk:
    """A new chunk of the same stream: the id, object, created and model of one of its chunks."""
    out: ChatCompletionChunk = {}
    if "id" in chunk:
        out["id"] = chunk["id"]
    if "object" in chunk:
        out["object"] = chunk["object"]
    if "created" in chunk:
        out["created"] = chunk["created"]
    if "model" in chunk:
        out["model"] = chunk["model"]
    return out


def create_anonymise(options: Mapping[str, Any], env: Env) -> PiiRedact:
    """Inferada's `anonymise`: the originals always come back, and the language sets the phone region."""
    check_options("anonymise", options, {"kinds"})
    return PiiRedact("restore", kinds_option(options, "anonymise"), REGIONS["en"], needs_language=True)


def kinds_option(
    options: Mapping[str, Any], name: str = "pii_redact", default: frozenset[str] = ALL_KINDS
) -> frozenset[str]:
    kinds_opt = options.get("kinds")
    if kinds_opt is None:
        return default
    if (
        isinstance(kinds_opt, list)
        and kinds_opt
        and all(isinstance(k, str) and k.upper() in ALL_KINDS for k in kinds_opt)
    ):
        return frozenset(k.upper() for k in kinds_opt)
    raise InvalidRequest(
        f"Processor `{name}`: `kinds` must be a non-empty list of {', '.join(sorted(ALL_KINDS))}.",
        param="processors",
        code="invalid_processor_options",
    )


def create(options: Mapping[str, Any], env: Env) -> PiiRedact:
    check_options("pii_redact", options, {"mode", "kinds", "region"})
    mode = choice("pii_redact", options, "mode", ("mask", "restore"))
    kinds = kinds_option(options)
    region = options.get("region", "US")
    if not isinstance(region, str) or len(region) != 2:
        raise InvalidRequest(
            "Processor `pii_redact`: `region` must be a two-letter country code.",
            param="processors",
            code="invalid_processor_options",
        )
    return PiiRedact(mode, kinds, region.upper())
