"""OpenAI's transcription answers to the canonical `Transcript`, and the format a transcript is asked in.

Pure functions: the OpenAI-compatible adapter's audio mixin (`providers/openai_audio.py`) sends and receives,
these decide what to ask for and read what came back. A provider that answers something that is not a
transcription (no `text`) is the provider's failure, never a 500 and never an empty transcript.
"""

from __future__ import annotations

from typing import Any, cast

from inferplex.errors import InvalidRequest
from inferplex.families.transcription import AudioRequest, Segment, Transcript, TranscriptUsage, Word
from inferplex.providers.failures import ErrorMap

# What the gateway renders each caller's format from: segments for subtitles and verbose_json.
_NEEDS = {"json": "json", "text": "json", "srt": "verbose_json", "vtt": "verbose_json"}


def upstream_format(request: AudioRequest, formats: frozenset[str], model: str, *, json_usage: bool = True) -> str:
    """The `response_format` to ask the upstream for, or a 400 saying what the model cannot give.

    srt, vtt and verbose_json need segments: verbose_json is asked for. json and text are asked as json, or as
    verbose_json where a vendor's json carries neither usage nor duration (`json_usage` False) so the
    audio's seconds are billed from the provider's own figure."""
    want = request.response_format
    need = _NEEDS.get(want, want)
    if need == "json" and not json_usage and "verbose_json" in formats:
        need = "verbose_json"
    if need not in formats:
        why = "timestamped segments" if need == "verbose_json" else f"the {need} format"
        raise InvalidRequest(
            f"response_format '{want}' needs {why}, which model `{model}` cannot give here; "
            f"it answers {', '.join(sorted(formats & {'json', 'text', 'verbose_json'})) or 'json'}.",
            param="response_format",
        )
    return need


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _segments(raw: Any) -> list[Segment]:
    out: list[Segment] = []
    if not isinstance(raw, list):
        return out
    for i, seg in enumerate(raw):
        if not isinstance(seg, dict) or not isinstance(seg.get("text"), str):
            continue
        start, end = _num(seg.get("start")), _num(seg.get("end"))
        if start is None or end is None:
            continue
        item = cast(Segment, dict(seg))
        item["id"] = seg["id"] if isinstance(seg.get("id"), int) else i
        item["start"], item["end"] = start, end
        out.append(item)
    return out


def _words(raw: Any) -> list[Word]:
    out: list[Word] = []
    for w in raw if isinstance(raw, list) else ():
        if isinstance(w, dict) and isinstance(w.get("word"), str):
            start, end = _num(w.get("start")), _num(w.get("end"))
            if start is not None and end is not None:
                out.append({"word": w["word"], "start": start, "end": end})
    return out


def read_transcript(data: Any, task: str, errors: ErrorMap) -> Transcript:
    """An OpenAI json / verbose_json / diarized_json transcription as the canonical `Transcript`."""
    if not isinstance(data, dict) or not isinstance(data.get("text"), str):
        raise errors.malformed("sent a transcription without text")
    usage = data.get("usage")
    extra = {k: data[k] for k in ("logprobs", "languages") if k in data}
    return Transcript(
        text=data["text"],
        task=task,
        language=data["language"] if isinstance(data.get("language"), str) else None,
        duration=_num(data.get("duration")),
        segments=_segments(data.get("segments")),
        words=_words(data.get("words")),
        usage=cast(TranscriptUsage, usage) if isinstance(usage, dict) and isinstance(usage.get("type"), str) else None,
        extra=extra,
    )
