"""What a file is, from its first bytes (its "magic"), and whether that agrees with the type it was sent as.

Types are compared by their canonical name: the aliases clients send (`image/jpg`, `audio/mp3`,
`audio/x-wav`, `audio/x-m4a`, `video/webm`...) name the same format. An MP4 container is `audio/mp4` or
`video/mp4` by its declared type when both are allowed: the magic says "MP4", not which.
"""

from __future__ import annotations

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})
AUDIO_TYPES = frozenset({"audio/mpeg", "audio/mp4", "audio/wav", "audio/webm", "audio/ogg", "audio/flac"})
VIDEO_TYPES = frozenset({"video/mp4", "video/webm"})
HEAD_BYTES = 64  # how much of a file `sniff` needs

_ALIASES = {
    "image/jpg": "image/jpeg",
    "image/pjpeg": "image/jpeg",
    "audio/mp3": "audio/mpeg",
    "audio/mpga": "audio/mpeg",
    "audio/mpeg3": "audio/mpeg",
    "audio/x-mpeg": "audio/mpeg",
    "audio/x-mp3": "audio/mpeg",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/vnd.wave": "audio/wav",
    "audio/x-pn-wav": "audio/wav",
    "audio/m4a": "audio/mp4",
    "audio/x-m4a": "audio/mp4",
    "audio/aac": "audio/mp4",
    "application/ogg": "audio/ogg",
    "audio/opus": "audio/ogg",
    "audio/x-flac": "audio/flac",
    "video/x-m4v": "video/mp4",
}
# Formats whose magic is shared by an audio and a video type: either name fits the bytes.
_SAME_MAGIC = {
    "audio/mp4": "video/mp4",
    "video/mp4": "audio/mp4",
    "audio/webm": "video/webm",
    "video/webm": "audio/webm",
    "audio/ogg": "video/ogg",
    "video/ogg": "audio/ogg",
}
UNSPECIFIC = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/unknown"})


def canonical(content_type: str | None) -> str:
    base = (content_type or "").split(";", 1)[0].strip().lower()
    return _ALIASES.get(base, base)


def sniff(head: bytes) -> str | None:
    """The canonical type the bytes start like, or None if none of the supported formats."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wav"
    if head.startswith(b"fLaC"):
        return "audio/flac"
    if head.startswith(b"OggS"):
        return "audio/ogg"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "video/webm" if b"webm" in head[:HEAD_BYTES] else "audio/webm"
    if head[4:8] == b"ftyp":
        return "audio/mp4" if head[8:12] in (b"M4A ", b"M4B ", b"M4P ") else "video/mp4"
    if head.startswith(b"ID3") or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE6 in (0xE2, 0xE4, 0xE6)):
        return "audio/mpeg"  # an ID3 tag, or an MPEG audio frame's sync word (layer I, II or III)
    return None


def fits(found: str, wanted: str) -> bool:
    """Whether bytes sniffed as `found` are a file of the canonical type `wanted`."""
    return found == wanted or _SAME_MAGIC.get(found) == wanted


def verdict(head: bytes, declared: str | None, allowed: frozenset[str] | set[str]) -> tuple[str, str | None]:
    """(the file's canonical type, None) when its bytes are of an allowed type agreeing with `declared`;
    else (what was found, 'unsupported' or 'mismatch')."""
    found = sniff(head)
    wanted = {canonical(a) for a in allowed}
    declared_c = canonical(declared)
    if found is None:
        return (declared_c or "unknown"), "unsupported"
    if declared_c not in UNSPECIFIC:
        if not fits(found, declared_c):
            return found, "mismatch"
        found = declared_c  # an MP4 sent as audio is audio
    for want in wanted:
        if fits(found, want):
            return want, None
    return found, "unsupported"
