"""`language`: detect the prompt's language, or enforce the one the request declares.

Detection is py3langid (langid.py's model, shipped inside the package: 142 ISO 639-1 codes, numpy only,
about 1 s to load once and well under a millisecond per prompt). The user
messages are classified together; the result (code and confidence) is reported and shared with later
processors (spellcheck uses it when no language was given).

With a declared language (`inferada.language`, or the `language` option) and `enforce` on (the default when
a language is declared), a prompt detected as another language with confidence >= `min_confidence` is
refused with a 422. A declared language the detector does not know is a 422 naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from inferplex.canonical import ChatRequest
from inferplex.errors import InvalidRequest, ProcessorRejected, UnsupportedLanguage
from inferplex.gateway_request import GatewayRequest
from inferplex.processors.base import Env, Exchange, Step, check_options, number
from inferplex.processors.text import texts


@cache
def _identifier() -> Any:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier  # type: ignore[import-untyped]

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def supported() -> frozenset[str]:
    return frozenset(_identifier().nb_classes)


def detect(text: str) -> tuple[str, float]:
    code, confidence = _identifier().classify(text)
    return str(code), float(confidence)


class Language(Step):
    name = "language"
    order = 10

    def __init__(self, declared: str | None, enforce: bool | None, min_confidence: float) -> None:
        super().__init__()
        self.declared = declared
        self.enforce = enforce
        self.min_confidence = min_confidence

    async def pre(self, ex: Exchange, request: GatewayRequest[ChatRequest]) -> GatewayRequest[ChatRequest]:
        declared = self.declared or ex.language
        if declared is not None and declared not in supported():
            raise UnsupportedLanguage(
                f"Processor `language` does not support the language `{declared}`.", param="language"
            )
        text = " ".join(texts(request.body, ("user",))).strip()
        code, confidence = detect(text) if text else ("und", 0.0)
        enforce = self.enforce if self.enforce is not None else declared is not None
        self.metadata.update(detected=code, confidence=round(confidence, 3))
        if declared is not None:
            self.metadata["declared"] = declared
        if enforce and declared is not None and code != declared and confidence >= self.min_confidence:
            self.metadata["decision"] = "rejected"
            raise ProcessorRejected(
                f"Processor `language` rejected the request: the prompt is in `{code}` "
                f"(confidence {confidence:.2f}), not the declared `{declared}`.",
                param="messages",
            )
        self.metadata["decision"] = "accepted" if enforce else "detected"
        ex.language = declared or (code if text else None)
        return request


def create(options: Mapping[str, Any], env: Env) -> Language:
    check_options("language", options, {"language", "enforce", "min_confidence"})
    declared = options.get("language")
    if declared is not None and (not isinstance(declared, str) or not declared):
        raise InvalidRequest("Processor `language`: `language` must be a code such as `en`.", param="processors")
    enforce = options.get("enforce")
    if enforce is not None and not isinstance(enforce, bool):
        raise InvalidRequest("Processor `language`: `enforce` must be true or false.", param="processors")
    min_confidence = number("language", options, "min_confidence", 0.8, 0.0, 1.0)
    return Language(declared.lower() if declared else None, enforce, min_confidence)
