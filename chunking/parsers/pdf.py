"""``.pdf``: pages with exact offsets and heading blocks, via pypdfium2 (PDFium).

PDFium was chosen over pypdf by measurement on ../shared/corpus/pdf (``python
bench/bench_parsers.py``): about 20x faster with the same words extracted, and it
exposes per-character font size and font name, which headings need. No OCR: a page
without a text layer is an empty page, a document without any is an error.

The invariant a caller relies on: ``doc.text`` is the block contents joined by a
blank line (:func:`chunking.parsers.build.assemble_structured`), in PDFium's reading
order, and page ``k`` starts at the first line of PDF page ``k`` (so
``doc.pages[k]`` holds exactly the words PDFium reads on that page). A sentence
that runs over a page break stays split there, as the PDF has it (the ``sentence``
strategy repairs it).

Content lines are paragraphs: a wrapped line is re-joined with the next when both
share a style, start at the same indent, the next is not a list item, and the
line stops short of the page's right edge by less than the next line's first word
(the word that did not fit; a paragraph's last line stops shorter). Lines in a
monospace font (code) are never joined; PDFium collapses their runs of spaces, so
their spacing (Python's indentation) is rebuilt from character positions on the
monospace column grid.

Headings, "within what a PDF can carry":

* With an outline (bookmarks, which LibreOffice and Word export from heading
  styles), a heading is a line, or up to three consecutive lines of one style (a
  wrapped heading), whose text equals the next bookmark titles in order. Its level
  is the rank of its font style (size, then bold) among the styles of all matched
  bookmark lines, so the largest heading style is level 1. The outline's tree depth
  is not used: it is relative (a sidebar ``h3`` at the root is depth 0).
* Without an outline, a line whose dominant style is larger than the body style (the
  most common one by characters), or bold at body size, and which is short, is a
  heading; levels rank those styles the same way.

Levels cannot be recovered where a style does not encode them (an ``h4`` set in the
body font is body text in the PDF), and a title page's large text is a heading only
when the PDF carries no outline.
"""

from __future__ import annotations

import ctypes
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

from chunking.limits import check_page_count
from chunking.model import ParsedDocument
from chunking.parsers.build import Outline, assemble_structured, strip_control
from chunking.parsers.errors import DocumentError

_MAX_HEADING_CHARS = 200
_NORMALISE = re.compile(r"[\s¶]+")
_LIST_START = re.compile(r"^\s*(?:[•◦▪‣∙·–—*-]|\(?\d{1,3}[.)]|\(?[a-z][.)])\s")
# A lone UTF-16 half, as PDFium's per-character reads give a character beyond the BMP (_clean).
_SURROGATE = re.compile("[\ud800-\udfff]")


class _PageError(Exception):
    def __init__(self, page: int, reason: str) -> None:
        super().__init__(page, reason)
        self.page, self.reason = page, reason


@dataclass
class _Line:
    text: str
    page: int
    style: tuple[float, bool]  # (font size rounded to 0.5 pt, bold)
    mono: bool = False  # set in a monospace font: code, whose lines are never re-joined
    left: float = 0.0
    right: float = 0.0


def parse_pdf(data: bytes, source: str, doc_id: str, sha256: str, *, max_pages: int | None = None) -> ParsedDocument:
    """Parse a PDF; with ``max_pages``, refuse one with more pages before reading any of them."""
    lines, bookmarks, page_count = _read(data, source, max_pages)
    if not any(line.text.strip() for line in lines):
        raise DocumentError(source, f"no extractable text in this PDF ({page_count} pages; no text layer, no OCR)")
    headings = (_outline_headings(lines, bookmarks) if bookmarks else {}) or _style_headings(lines)
    return assemble_structured(doc_id=doc_id, source_name=source, fmt="pdf", sha256=sha256,
                               drafts=_outline(lines, headings).result(), page_count=page_count, max_pages=max_pages,
                               metadata={"pdf_engine": "pypdfium2", "bookmarks": len(bookmarks)})


def _read(data: bytes, source: str, max_pages: int | None = None) -> tuple[list[_Line], list[str], int]:
    """``(lines, bookmark keys, page count)``; DocumentError for a broken file."""
    import pypdfium2 as pdfium

    if b"%PDF-" not in data[:1024]:
        raise DocumentError(source, "not a PDF: no %PDF- header")
    if b"%%EOF" not in data[-2048:]:
        raise DocumentError(source, "PDF is truncated: no %%EOF end-of-file marker")
    try:
        pdf = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if "password" in str(exc).lower():
            raise DocumentError(source, "PDF is encrypted: a password is required") from None
        raise DocumentError(source, f"PDF is corrupt: {exc}") from None
    try:
        page_count = len(pdf)
        check_page_count(page_count, max_pages, source)
        return _lines(pdf), _bookmarks(pdf), page_count
    except _PageError as exc:
        raise DocumentError(source, f"PDF is corrupt: page {exc.page + 1} of {page_count} cannot be read "
                                    f"({exc.reason})") from None
    finally:
        pdf.close()


def _outline(lines: list[_Line], headings: dict[int, tuple[int, int]]) -> Outline:
    """Headings where ``headings`` says, wrapped lines re-joined into paragraphs between."""
    outline = Outline()
    right_edge: dict[int, float] = {}
    for line in lines:
        right_edge[line.page] = max(right_edge.get(line.page, 0.0), line.right)
    paragraph: list[_Line] = []

    def flush() -> None:
        if paragraph:
            outline.para(_join(paragraph), page=paragraph[0].page)
            paragraph.clear()

    i = 0
    while i < len(lines):
        if i in headings:
            flush()
            count, level = headings[i]
            outline.heading(" ".join(line.text.strip() for line in lines[i:i + count]), level, page=lines[i].page)
            i += count
            continue
        if paragraph and not _continues(paragraph[-1], lines[i], right_edge[paragraph[-1].page]):
            flush()
        paragraph.append(lines[i])
        i += 1
    flush()
    return outline


def _lines(pdf) -> list[_Line]:  # noqa: ANN001 - pypdfium2 document
    import pypdfium2 as pdfium
    import pypdfium2.raw as raw

    name_buffer = ctypes.create_string_buffer(128)
    flags = ctypes.c_int()
    out: list[_Line] = []
    for page_index in range(len(pdf)):
        try:
            page = pdf[page_index]
            textpage = page.get_textpage()
        except pdfium.PdfiumError as exc:
            raise _PageError(page_index, str(exc)) from None
        try:
            count = textpage.count_chars()
            text = textpage.get_text_range() if count > 0 else ""
            # get_text_range is one call; fall back to per-char reads only when it
            # does not line up with the char indices (surrogate pairs).
            if len(text) != count:
                text = "".join(chr(raw.FPDFText_GetUnicode(textpage.raw, i)) for i in range(count))
            start = 0
            page_lines: list[tuple[_Line, str, int]] = []
            for piece in text.split("\n"):
                end = start + len(piece)
                line = _clean(piece)
                if line.strip():
                    measured = _measure(raw, textpage.raw, line, piece, start, page_index, name_buffer, flags)
                    page_lines.append((measured, piece, start))
                start = end + 1
            _restore_code_spacing(raw, textpage.raw, page_lines)
            out.extend(line for line, _, _ in page_lines)
        finally:
            textpage.close()
            page.close()
    return out


def _clean(piece: str) -> str:
    # PDFium reports a hyphen it cannot map (LibreOffice's non-breaking hyphen, a
    # soft hyphen) as U+FFFE or U+0002.
    line = strip_control(piece.replace("\ufffe", "-").replace("\x02", "-").replace("\r", ""))
    if _SURROGATE.search(line):
        # Read char by char (PDFium counts a character beyond the BMP as its two UTF-16
        # halves), such a character comes as two lone surrogates, which UTF-8 cannot hold:
        # joined back into it (the piece keeps PDFium's indexes); a half alone becomes U+FFFD.
        line = line.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return line


def _restore_code_spacing(raw, textpage, page_lines: list[tuple[_Line, str, int]]) -> None:  # noqa: ANN001
    """Re-create the spaces of monospace lines from character positions.

    PDFium collapses a run of spaces to one (or none), which loses Python's
    indentation. In a monospace run of lines every character sits on a column
    grid: its column is its x offset from the run's leftmost character divided by
    the advance width (the median step between neighbouring characters).
    """
    runs: list[list[tuple[_Line, str, int]]] = []
    previous_mono = False
    for item in page_lines:
        if item[0].mono:
            if previous_mono:
                runs[-1].append(item)
            else:
                runs.append([item])
        previous_mono = item[0].mono
    x, y = ctypes.c_double(), ctypes.c_double()
    for run in runs:
        positions: list[list[tuple[float, str]]] = []
        steps: list[float] = []
        for line, piece, start in run:
            chars = []
            spaced = False
            for i, ch in enumerate(piece):
                if ch.isspace() or ch in "\r\x02\ufffe" or not ch.isprintable():
                    spaced = spaced or ch.isspace()
                    continue
                raw.FPDFText_GetCharOrigin(textpage, start + i, x, y)
                chars.append((x.value, ch, spaced))
                spaced = False
            for (x0, _, _), (x1, _, gap) in zip(chars, chars[1:]):
                if x1 > x0 and not gap:
                    steps.append(x1 - x0)
            positions.append(chars)
        if not steps or not any(positions):
            continue
        steps.sort()
        advance = steps[len(steps) // 2]
        base = min(chars[0][0] for chars in positions if chars)
        if advance <= 0:
            continue
        for (line, piece, _), chars in zip(run, positions):
            rebuilt = ""
            for pos, ch, spaced in chars:
                column = round((pos - base) / advance)
                if rebuilt and not spaced:
                    column = len(rebuilt)  # inside a word (maybe a proportional one): no gap to fill
                elif spaced and rebuilt:
                    column = max(column, len(rebuilt) + 1)  # never lose a space PDFium saw
                if column > len(rebuilt):
                    rebuilt += " " * (column - len(rebuilt))
                rebuilt += ch
            # Only trust the grid when it kept every character of the line.
            if rebuilt.replace(" ", "") == line.text.replace(" ", "") and rebuilt.strip():
                line.text = rebuilt.rstrip()


def _measure(raw, textpage, line: str, piece: str, start: int, page: int, name_buffer, flags) -> _Line:  # noqa: ANN001
    """The line with its style (font size, boldness and monospacing of its first,
    middle and last visible characters, the most common of them) and its left and
    right edges."""
    visible = [i for i, ch in enumerate(piece) if not ch.isspace() and ch not in "\r\x02\ufffe"]
    if not visible:
        return _Line(line, page, (0.0, False))
    samples = sorted({visible[0], visible[len(visible) // 2], visible[-1]})
    styles = []
    for i in samples:
        size = round(raw.FPDFText_GetFontSize(textpage, start + i) * 2) / 2
        raw.FPDFText_GetFontInfo(textpage, start + i, name_buffer, len(name_buffer), ctypes.byref(flags))
        name = name_buffer.value.lower()
        weight = raw.FPDFText_GetFontWeight(textpage, start + i)
        bold = b"bold" in name or b"black" in name or b"heavy" in name or weight >= 600
        mono = b"mono" in name or b"courier" in name or b"code" in name or bool(flags.value & 1)  # FixedPitch
        styles.append(((size, bold), mono))
    (style, mono), _ = Counter(styles).most_common(1)[0]
    left, right, bottom, top = (ctypes.c_double() for _ in range(4))
    raw.FPDFText_GetCharBox(textpage, start + visible[0], left, right, bottom, top)
    x0 = left.value
    raw.FPDFText_GetCharBox(textpage, start + visible[-1], left, right, bottom, top)
    return _Line(line, page, style, mono, x0, right.value)


def _continues(previous: _Line, line: _Line, right_edge: float) -> bool:
    """Whether ``line`` carries on the paragraph that ``previous`` ends: same page,
    same style, not code, not a new list item, and ``previous`` runs (nearly) to the
    right edge, as a wrapped line does."""
    if line.page != previous.page or line.style != previous.style or line.mono or previous.mono:
        return False
    if _LIST_START.match(line.text):
        return False
    size = line.style[0] or 10.0
    if abs(line.left - previous.left) > 1.5 * size:
        return False
    # A wrapped line stops short of the edge by less than the next line's first
    # word (the word that did not fit); ~0.55 em per character, plus the space.
    first_word = line.text.split(None, 1)[0] if line.text.strip() else ""
    return previous.right + (len(first_word) + 2) * 0.55 * size >= right_edge


def _join(lines: list[_Line]) -> str:
    if lines[0].mono:
        return lines[0].text.rstrip()  # code keeps its indentation (and is never joined)
    out = lines[0].text.strip()
    for line in lines[1:]:
        text = line.text.strip()
        if out and text and _is_wide(out[-1]) and _is_wide(text[0]):
            out += text
        else:
            out += " " + text
    return out


def _is_wide(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F")


def _bookmarks(pdf) -> list[str]:  # noqa: ANN001
    try:
        return [key for item in pdf.get_toc(max_depth=16) if (key := _key(item.get_title() or ""))]
    except Exception:  # a broken outline is no outline
        return []


def _key(text: str) -> str:
    return _NORMALISE.sub("", text).casefold()


def _outline_headings(lines: list[_Line], bookmarks: list[str]) -> dict[int, tuple[int, int]]:
    """``{line index: (line count, level)}`` for lines matching the bookmarks in order."""
    matched: dict[int, tuple[int, tuple[float, bool]]] = {}
    next_bookmark = 0
    i = 0
    while i < len(lines) and next_bookmark < len(bookmarks):
        hit = None
        for count in (1, 2, 3):
            chunk = lines[i:i + count]
            if len(chunk) < count or len({line.style for line in chunk}) > 1:
                break
            key = _key("".join(line.text for line in chunk))
            if len(key) > _MAX_HEADING_CHARS:
                break
            # A bookmark whose heading is missing from the text must not stall the
            # rest: look a few titles ahead.
            for j in range(next_bookmark, min(next_bookmark + 8, len(bookmarks))):
                if key == bookmarks[j]:
                    hit = (count, j)
                    break
            if hit or not bookmarks[next_bookmark].startswith(key):
                break
        if hit:
            count, j = hit
            matched[i] = (count, lines[i].style)
            next_bookmark = j + 1
            i += count
        else:
            i += 1
    if len(matched) < max(1, len(bookmarks) // 2):
        return {}
    return _rank(matched)


def _style_headings(lines: list[_Line]) -> dict[int, tuple[int, int]]:
    weights: Counter[tuple[float, bool]] = Counter()
    for line in lines:
        weights[line.style] += len(line.text)
    if not weights:
        return {}
    body_size, body_bold = weights.most_common(1)[0][0]
    matched: dict[int, tuple[int, tuple[float, bool]]] = {}
    i = 0
    while i < len(lines):
        size, bold = lines[i].style
        if len(lines[i].text.strip()) <= _MAX_HEADING_CHARS and (size > body_size * 1.1 or (size >= body_size and bold and not body_bold)):
            count = 1
            while count < 3 and i + count < len(lines) and lines[i + count].style == lines[i].style:
                count += 1
            matched[i] = (count, lines[i].style)
            i += count
        else:
            i += 1
    return _rank(matched)


def _rank(matched: dict[int, tuple[int, tuple[float, bool]]]) -> dict[int, tuple[int, int]]:
    order = sorted({style for _, style in matched.values()}, key=lambda s: (-s[0], not s[1]))
    level = {style: min(rank + 1, 9) for rank, style in enumerate(order)}
    return {i: (count, level[style]) for i, (count, style) in matched.items()}
