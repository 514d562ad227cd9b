"""Pure parts of the media store, as tables: magic bytes against declared types, byte ranges, signatures,
and the download's Content-Disposition."""

from __future__ import annotations

import time

import pytest

from inferplex.media_store.download import UNSATISFIABLE, disposition, parse_range
from inferplex.media_store.signing import Signer, load_key
from inferplex.media_store.sniff import AUDIO_TYPES, IMAGE_TYPES, sniff, verdict

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 56
JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 60
GIF = b"GIF89a" + b"\0" * 58
WEBP = b"RIFF\x10\0\0\0WEBPVP8 " + b"\0" * 48
WAV = b"RIFF\x10\0\0\0WAVEfmt " + b"\0" * 48
MP3_ID3 = b"ID3\x04\0" + b"\0" * 59
MP3_FRAME = b"\xff\xfb\x90\x64" + b"\0" * 60
M4A = b"\0\0\0\x20ftypM4A \0\0\0\0" + b"\0" * 48
MP4 = b"\0\0\0\x20ftypisom\0\0\0\0" + b"\0" * 48
WEBM = b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81\x01\x42\xf7\x81\x01\x42\xf2\x81\x04\x42\xf3\x81\x08\x42\x82\x84webm"
OGG = b"OggS\0\x02" + b"\0" * 58
FLAC = b"fLaC\0\0\0\x22" + b"\0" * 56


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (PNG, "image/png"), (JPEG, "image/jpeg"), (GIF, "image/gif"), (WEBP, "image/webp"), (WAV, "audio/wav"),
        (MP3_ID3, "audio/mpeg"), (MP3_FRAME, "audio/mpeg"), (M4A, "audio/mp4"), (MP4, "video/mp4"),
        (WEBM, "video/webm"), (OGG, "audio/ogg"), (FLAC, "audio/flac"), (b"hello world", None),
        (b"%PDF-1.7", None), (b"", None), (b"\xff\xd8", None),
    ],
)  # fmt: skip
def test_sniff(head: bytes, expected: str | None) -> None:
    assert sniff(head) == expected


@pytest.mark.parametrize(
    ("head", "declared", "allowed", "expected"),
    [
        (PNG, "image/png", IMAGE_TYPES, ("image/png", None)),
        (JPEG, "image/jpg", IMAGE_TYPES, ("image/jpeg", None)),  # an alias
        (PNG, "application/octet-stream", IMAGE_TYPES, ("image/png", None)),  # unspecific: the bytes decide
        (PNG, "", IMAGE_TYPES, ("image/png", None)),
        (PNG, "image/jpeg", IMAGE_TYPES, ("image/png", "mismatch")),
        (WAV, "image/png", IMAGE_TYPES, ("audio/wav", "mismatch")),
        (WAV, "audio/wav", IMAGE_TYPES, ("audio/wav", "unsupported")),
        (b"just some text" * 5, "image/png", IMAGE_TYPES, ("image/png", "unsupported")),
        (MP3_FRAME, "audio/mp3", AUDIO_TYPES, ("audio/mpeg", None)),
        (MP4, "audio/mp4", AUDIO_TYPES, ("audio/mp4", None)),  # an MP4 sent as audio is audio
        (M4A, "audio/x-m4a", AUDIO_TYPES, ("audio/mp4", None)),
        (MP4, "video/mp4", AUDIO_TYPES, ("audio/mp4", None)),  # the same container, accepted as audio
        (WEBM, "audio/webm", AUDIO_TYPES, ("audio/webm", None)),
        (OGG, "audio/ogg; codecs=opus", AUDIO_TYPES, ("audio/ogg", None)),
        (FLAC, "audio/flac", AUDIO_TYPES, ("audio/flac", None)),
        (GIF, "image/gif", AUDIO_TYPES, ("image/gif", "unsupported")),
        (FLAC, "audio/wav", AUDIO_TYPES, ("audio/flac", "mismatch")),
    ],
)  # fmt: skip
def test_verdict(head: bytes, declared: str, allowed: frozenset[str], expected: tuple[str, str | None]) -> None:
    assert verdict(head, declared, allowed) == expected


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        (None, 100, None), ("", 100, None), ("bytes=0-9", 100, (0, 9)), ("bytes=90-", 100, (90, 99)),
        ("bytes=-10", 100, (90, 99)), ("bytes=-500", 100, (0, 99)), ("bytes=50-5000", 100, (50, 99)),
        ("bytes=100-", 100, UNSATISFIABLE), ("bytes=-0", 100, UNSATISFIABLE), ("bytes=5-1", 100, None),
        ("bytes=0-1,5-9", 100, None), ("items=0-1", 100, None), ("bytes=abc", 100, None),
        ("bytes=0-0", 0, UNSATISFIABLE), ("BYTES = 1 - 2", 100, (1, 2)),
    ],
)  # fmt: skip
def test_parse_range(header: str | None, size: int, expected: object) -> None:
    assert parse_range(header, size) == expected


def test_signatures(tmp_path: object) -> None:
    signer = Signer(b"k" * 32)
    later = int(time.time()) + 60
    sig = signer.signature("file-abc", later)
    assert signer.check("file-abc", str(later), sig) is None
    assert signer.check("file-abd", str(later), sig) == "invalid"  # another file
    assert signer.check("file-abc", str(later + 1), sig) == "invalid"  # the expiry moved
    assert signer.check("file-abc", str(later), sig[:-1] + ("A" if sig[-1] != "A" else "B")) == "invalid"
    assert signer.check("file-abc", str(later), "") == "invalid"
    assert signer.check("file-abc", "soon", sig) == "invalid"
    assert signer.check("file-abc", str(later), "é") == "invalid"
    assert Signer(b"other" * 8).check("file-abc", str(later), sig) == "invalid"
    past = int(time.time()) - 1
    assert signer.check("file-abc", str(past), signer.signature("file-abc", past)) == "expired"


def test_the_generated_key_is_made_once_and_private(tmp_path: object) -> None:
    from pathlib import Path

    d = Path(str(tmp_path))
    first = load_key(None, str(d))
    assert load_key(None, str(d)) == first and len(first) == 64
    assert (d / "media_signing_key").stat().st_mode & 0o777 == 0o600
    assert load_key("configured", str(d)) == b"configured"


def test_content_disposition_names_the_file_safely() -> None:
    assert disposition("cat.png") == "inline; filename=\"cat.png\"; filename*=UTF-8''cat.png"
    assert disposition('a"b\r\n.png') == "inline; filename=\"a_b__.png\"; filename*=UTF-8''a%22b%0D%0A.png"
    assert disposition("café.mp3").startswith("inline; filename=\"cafe.mp3\"; filename*=UTF-8''caf%C3%A9.mp3")
