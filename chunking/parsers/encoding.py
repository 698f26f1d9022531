"""Decode the bytes of a text file, detecting the encoding.

The invariant a caller relies on: ``decode_text(data)`` returns ``(text, encoding)``
where ``data.decode(encoding)`` (modulo the BOM) gave ``text``; it never guesses
silently between two plausible encodings without the detector's say, and raises
:class:`DocumentError` for bytes that are not text in any encoding.

Order of evidence, strongest first: a byte-order mark; strict UTF-8 (valid UTF-8 of
any length is overwhelmingly likely to be UTF-8, and a detector is slow and
unreliable on short inputs); UTF-8 with a few damaged bytes among many valid
multi-byte sequences (decoded with U+FFFD for the damage); then charset-normalizer;
and when that finds nothing, UTF-8 with U+FFFD if at most 1% of the text is damage.

Short non-UTF-8 input gives the detector little to go on, so two tie-breaks: among
the code pages it rates equally good, cp1252 (the Latin-1 superset Windows writes)
wins — this is what gets a 28-byte "Café au lait" right where cp1250 ties with it;
and a CJK double-byte pick is overruled by cp1252 when every non-ASCII byte reads
as a letter inside a Latin word ("über Öl" is not two Big5 characters).
"""

from __future__ import annotations

import codecs
import re

from charset_normalizer import from_bytes

from chunking.parsers.errors import DocumentError

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Control characters other than tab/newline/carriage return: their share tells
# binary from text.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Multi-byte encodings a detector may pick for a short Western text.
_CJK_MULTIBYTE = {"big5", "big5hkscs", "gb18030", "gbk", "gb2312", "shift_jis", "shift_jis_2004", "shift_jisx0213",
                  "cp932", "euc_jp", "euc_jis_2004", "euc_kr", "cp949", "cp950", "johab", "hz", "iso2022_jp"}
# Detection on a prefix is enough and keeps a 50 MB file from taking seconds.
_DETECT_PREFIX = 256 * 1024


def decode_text(data: bytes, source: str = "") -> tuple[str, str]:
    """``(text, encoding)`` for the raw bytes of a text file; see the module docstring."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(name), name
            except UnicodeDecodeError as exc:
                raise DocumentError(source, f"text starts with a {name} byte-order mark but is not valid {name}: {exc.reason}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    else:
        _reject_binary(text, source)
        return text, "utf-8"
    damaged = _mostly_utf8(data)
    if damaged is not None:
        return damaged, "utf-8"
    try:
        name = _detect(data, source)
        text = data.decode(name)
    except (DocumentError, UnicodeDecodeError, LookupError) as exc:
        # Last resort: mostly-ASCII text with a little damage is still text.
        text = data.decode("utf-8", errors="replace")
        damage = text.count("\ufffd") + len(_CONTROL.findall(text))
        if damage <= len(text) // 100:
            return text, "utf-8"
        if isinstance(exc, DocumentError):
            raise
        raise DocumentError(source, f"not decodable as the detected encoding {name}") from None
    _reject_binary(text, source)
    return text, name


def _mostly_utf8(data: bytes) -> str | None:
    """UTF-8 text with a few damaged bytes (a bad copy, a cut multi-byte sequence),
    decoded with U+FFFD for them; ``None`` when the bytes are not near-UTF-8.

    A legacy encoding of non-ASCII text fails UTF-8 on nearly every non-ASCII byte,
    while damaged UTF-8 fails on a handful among many valid multi-byte sequences,
    so the share of valid sequences tells them apart.
    """
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd") - data.decode("utf-8", errors="ignore").count("\ufffd")
    multibyte = sum(1 for ch in text if ord(ch) > 0x7F and ch != "\ufffd")
    if bad and multibyte >= 20 * bad and not _CONTROL.search(text[:4096].replace("\x00", "")):
        return text
    return None


def _detect(data: bytes, source: str) -> str:
    matches = from_bytes(data[:_DETECT_PREFIX])
    best = matches.best()
    if best is None:
        raise DocumentError(source, "not text: no character encoding decodes these bytes")
    name = _canonical(best.encoding)
    tied = {_canonical(m.encoding) for m in matches if (m.chaos, m.coherence) == (best.chaos, best.coherence)}
    if "cp1252" in tied or (name in _CJK_MULTIBYTE and _looks_latin(data)):
        return "cp1252"
    # A detector answer decoded over a prefix may still fail on the whole file;
    # its superset usually does not (Shift-JIS -> cp932, GB2312 -> GB18030).
    widen = {"shift_jis": "cp932", "gb2312": "gb18030", "gbk": "gb18030", "euc_kr": "cp949"}
    return widen.get(name, best.encoding)


def _canonical(encoding: str) -> str:
    return codecs.lookup(encoding).name.replace("-", "_")


def _looks_latin(data: bytes) -> bool:
    """Whether every non-ASCII byte reads, in cp1252, as a letter inside a Latin
    word ("über", "Öl"). A short Western text has too few such bytes for the
    detector, which then reads byte pairs like "ü"+"b" as one CJK character."""
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return False
    found = False
    for i, ch in enumerate(text):
        if ord(ch) < 0x80:
            continue
        found = True
        neighbours = text[max(i - 1, 0):i] + text[i + 1:i + 2]
        if not ch.isalpha() or not any(n.isascii() and n.isalpha() for n in neighbours):
            return False
    return found


def _reject_binary(text: str, source: str) -> None:
    sample = text[:65536]
    if sample and len(_CONTROL.findall(sample)) > max(8, len(sample) // 10):
        raise DocumentError(source, "not text: too many control characters (binary file?)")
