"""``.docx``: heading blocks from outline levels (following ``basedOn``), tables,
explicit page breaks.

Read with the standard library's :mod:`zipfile` and lxml on the XML parts, with
entity expansion, DTD loading and network access off (a "billion laughs" part stays
unexpanded). Every part is inflated as a stream into an incremental XML parser and
counted as it goes: no part is ever inflated past ``max_part_bytes`` (the
``limits.max_inflated_bytes`` budget), whatever its zip header claims, and the raw
XML of a part is never held whole in memory.

The invariant a caller relies on: ``doc.text`` is the block contents joined by a
blank line (:func:`chunking.parsers.build.assemble_structured`); page ``k`` starts
at the first line after the ``k``-th explicit page break (``<w:br w:type="page"/>``
or ``pageBreakBefore``). Word's rendered page breaks (``lastRenderedPageBreak``)
are layout guesses of whichever program last saved the file and are ignored.

Heading levels (seed P §3.1, LightRAG's native docx parser with fixlevel=0): a
paragraph's effective ``w:outlineLvl`` is its own, else its style's, else that of
the style it is ``basedOn``, recursively; outline levels 0-8 become levels 1-9 (9
is body text). A style with no outline level anywhere in its chain but named
"heading N" counts as level N (files written without outline levels in styles.xml),
as does an undefined style id "HeadingN" (a file without styles.xml).
``Title`` is not a heading (it has no outline level) and is kept as
``doc_title``. A trailing "¶" permalink in a heading is dropped.

A paragraph's text is kept verbatim (``w:t`` is, with ``xml:space="preserve"``),
its line breaks (``w:br``) split it into content lines: that is how code blocks
are written, and their indentation survives. List items get their label from
numbering.xml ("•", "3.", "3.a)"), counted as Word counts them. Table cells are
whitespace-collapsed. Equations (OMML) are kept as their linear text inline: OMML
has no LaTeX to put in an ``<equation>`` tag. Not read: headers, footers,
footnotes, comments.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
import zlib
from typing import Any, Iterator, NamedTuple

from lxml import etree

from chunking.model import ParsedDocument
from chunking.parsers.build import Outline, assemble_structured, one_line, table_id_prefix
from chunking.limits import LimitExceeded
from chunking.parsers.errors import DocumentError

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_W = "{%s}" % W
_REL = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_WP = "{http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing}"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_M = "{http://schemas.openxmlformats.org/officeDocument/2006/math}"
_OFFICE_DOC = "officeDocument"
_RELATED = ("styles", "numbering")

# A part is inflated in steps and refused once past limits.max_inflated_bytes, whatever its header
# says; one over 1 MiB that inflates more than limits.max_compression_ratio times its compressed
# size is refused before it is parsed: 60 MiB of empty paragraphs (682:1) are millions of XML
# elements, which exhaust the parse worker's memory under a message that blames the XML. Real
# parts compress 5-20:1; a part of one paragraph repeated compresses ~330:1, so the limit can
# be raised for such a document.
MAX_PART_BYTES = 64 * 1024 * 1024
MAX_COMPRESSION_RATIO = 200
_RATIO_CHECK_FLOOR = 1024 * 1024
_INFLATE_STEP = 1024 * 1024


class _PartLimit(NamedTuple):
    bytes: int  # limits.max_inflated_bytes
    ratio: int  # limits.max_compression_ratio
_HEADING_NAME = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)


# libxml2's nesting bound when huge_tree is off (xmlParserMaxDepth).
_XML_MAX_DEPTH = 256
# How libxml2's messages name those bounds: most suggest XML_PARSE_HUGE, a too long name does not.
_XML_SAFETY_LIMIT_SIGNS = ("XML_PARSE_HUGE", "Name too long")


def _xml_parser() -> etree.XMLParser:
    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, dtd_validation=False,
                           huge_tree=False, remove_comments=True, remove_pis=True)


def parse_docx(data: bytes, source: str, doc_id: str, sha256: str, *,
               max_part_bytes: int = MAX_PART_BYTES, max_pages: int | None = None,
               max_compression_ratio: int = MAX_COMPRESSION_RATIO) -> ParsedDocument:
    part_limit = _PartLimit(max_part_bytes, max_compression_ratio)
    container = _open_container(data, source)
    with container:
        document_name, related = _main_parts(container, source, part_limit)
        document = _xml(container, document_name, source, part_limit)
        styles, numbering = (_xml(container, related[k], source, part_limit) if k in related else None
                             for k in ("styles", "numbering"))
    # mc:AlternateContent holds the same content twice (a modern Choice and a VML
    # Fallback for old readers); tracked changes hold deleted and moved-away text.
    # Read what the document shows, once.
    for hidden in list(document.iter(f"{_MC}Fallback", f"{_W}del", f"{_W}moveFrom")):
        parent = hidden.getparent()
        if parent is not None:
            parent.remove(hidden)
    body = document.find(f"{_W}body")
    if body is None:
        raise DocumentError(source, f"not a DOCX document: {document_name} has no w:body")
    walker = _Walker(_StyleLevels(styles), _Numbering(numbering), table_id_prefix(doc_id, sha256))
    walker.walk(body)
    drafts = walker.outline.result()
    if not drafts:
        raise DocumentError(source, "no text content in this DOCX document")
    return assemble_structured(doc_id=doc_id, source_name=source, fmt="docx", sha256=sha256, drafts=drafts,
                               tables=walker.tables, page_count=walker.page + 1, max_pages=max_pages,
                               metadata={"doc_title": walker.title} if walker.title else None)


# -- container -------------------------------------------------------------------


def _open_container(data: bytes, source: str) -> zipfile.ZipFile:
    if data.startswith(b"\xd0\xcf\x11\xe0"):
        raise DocumentError(source, "not a DOCX container: this is a legacy OLE2 .doc file (or encrypted DOCX)")
    try:
        return zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError, OSError):
        kind = "a corrupt or truncated zip archive" if data.startswith(b"PK") else "not a zip archive"
        raise DocumentError(source, f"not a DOCX container ({kind})") from None


def _main_parts(container: zipfile.ZipFile, source: str, limit: _PartLimit) -> tuple[str, dict[str, str]]:
    """The main document part and its related parts that exist, by kind
    (``"styles"``, ``"numbering"``), from the relationships or the usual names."""
    names = set(container.namelist())
    document = "word/document.xml"
    if "_rels/.rels" in names:
        rels = _xml(container, "_rels/.rels", source, limit)
        for rel in rels.iter(f"{_REL}Relationship"):
            if rel.get("Type", "").endswith("/" + _OFFICE_DOC):
                document = rel.get("Target", document).lstrip("/")
    if document not in names:
        raise DocumentError(source, "not a DOCX container: no word/document.xml part (another Office/zip format?)")
    folder = document.rsplit("/", 1)[0] + "/" if "/" in document else ""
    related = {kind: f"{folder}{kind}.xml" for kind in _RELATED}
    rels_name = f"{folder}_rels/{document.rsplit('/', 1)[-1]}.rels"
    if rels_name in names:
        for rel in _xml(container, rels_name, source, limit).iter(f"{_REL}Relationship"):
            kind = rel.get("Type", "").rsplit("/", 1)[-1]
            if kind in _RELATED and rel.get("Target"):
                related[kind] = folder + rel.get("Target").lstrip("/")
    return document, {kind: name for kind, name in related.items() if name in names}


def _xml(container: zipfile.ZipFile, name: str, source: str, part_limit: _PartLimit) -> Any:
    """The parsed XML of one zip entry, inflated in steps and never past ``part_limit.bytes``."""
    info = container.getinfo(name)
    limit = part_limit.bytes
    ratio = info.file_size / max(info.compress_size, 1)
    if info.file_size > limit:
        raise LimitExceeded(source, "max_inflated_bytes", f"DOCX part {name} inflated to",
                            f"{info.file_size} bytes", f"{limit} bytes")
    # Within the budget, but a bomb's shape. (A header claiming a smaller size than the truth gets no
    # further: zipfile inflates no more than the size claimed, then fails its CRC check.)
    if info.file_size > _RATIO_CHECK_FLOOR and ratio > part_limit.ratio:
        raise LimitExceeded(source, "max_compression_ratio", f"DOCX part {name} ({info.file_size} bytes) inflates",
                            f"{ratio:.0f} times its compressed size, which", f"{part_limit.ratio}")
    parser = _xml_parser()
    inflated = 0
    try:
        with container.open(info) as handle:
            # The header may lie about the size: count what is really inflated.
            while piece := handle.read(_INFLATE_STEP):
                inflated += len(piece)
                if inflated > limit:
                    raise LimitExceeded(source, "max_inflated_bytes", f"DOCX part {name} inflated to",
                                        f"over {limit} bytes", f"{limit} bytes")
                parser.feed(piece)
        return parser.close()
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError) as exc:
        raise DocumentError(source, f"corrupt DOCX: cannot inflate {name} ({exc})") from None
    except etree.XMLSyntaxError as exc:
        if any(sign in str(exc) for sign in _XML_SAFETY_LIMIT_SIGNS):
            # Not corrupt: over libxml2's default bounds, which stay on for untrusted input.
            raise DocumentError(source, f"refused: {name} is over the XML parser's safety limits (libxml2 without "
                                        f"huge_tree: e.g. {_XML_MAX_DEPTH} levels of nesting, 10 MB in one text "
                                        f"node or attribute, 50,000 characters in one name; not a chunkyard "
                                        f"setting): {exc}") from None
        raise DocumentError(source, f"corrupt DOCX: {name} is not well-formed XML ({exc})") from None


# -- styles ------------------------------------------------------------------------


class _StyleLevels:
    """Effective outline level per paragraph style id, following ``w:basedOn``."""

    def __init__(self, styles: Any) -> None:
        self._own: dict[str, int | None] = {}
        self._based_on: dict[str, str] = {}
        self._name_level: dict[str, int] = {}
        self.names: dict[str, str] = {}
        self._cache: dict[str, int | None] = {}
        if styles is None:
            return
        for style in styles.iter(f"{_W}style"):
            if style.get(f"{_W}type", "paragraph") != "paragraph":
                continue
            sid = style.get(f"{_W}styleId")
            if not sid:
                continue
            name = style.find(f"{_W}name")
            self.names[sid] = name.get(f"{_W}val", "") if name is not None else ""
            outline = style.find(f"{_W}pPr/{_W}outlineLvl")
            self._own[sid] = _int(outline.get(f"{_W}val")) if outline is not None else None
            based = style.find(f"{_W}basedOn")
            if based is not None and based.get(f"{_W}val"):
                self._based_on[sid] = based.get(f"{_W}val")
            match = _HEADING_NAME.match(self.names[sid].strip())
            if match:
                self._name_level[sid] = int(match.group(1))

    def outline_level(self, style_id: str | None) -> int | None:
        """0-8 for a heading style, ``None`` for body text."""
        if not style_id:
            return None
        if style_id not in self._cache:
            self._cache[style_id] = self._resolve(style_id)
        return self._cache[style_id]

    def _resolve(self, style_id: str) -> int | None:
        seen: set[str] = set()
        current: str | None = style_id
        while current and current not in seen:  # a basedOn cycle ends the walk
            seen.add(current)
            own = self._own.get(current)
            if own is not None:
                return own if 0 <= own <= 8 else None
            current = self._based_on.get(current)
        named = self._name_level.get(style_id)
        if named is None and style_id not in self.names:
            # A style styles.xml does not define (or no styles.xml at all): Word's
            # built-in ids are "Heading1".."Heading9".
            match = _HEADING_NAME.match(style_id)
            named = int(match.group(1)) if match else None
        return named - 1 if named else None

    def is_title(self, style_id: str | None) -> bool:
        return bool(style_id) and (style_id == "Title" or self.names.get(style_id or "", "").lower() == "title")


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


# -- body ---------------------------------------------------------------------------


class _Numbering:
    """List labels ("•", "3.", "b)") from numbering.xml, counted as the body is walked.

    Counters run per ``numId`` and level; a level's count restarts after any
    shallower item, as Word numbers lists.
    """

    def __init__(self, numbering: Any) -> None:
        self._levels: dict[tuple[str, int], tuple[str, str, int]] = {}
        self._counters: dict[str, list[int]] = {}
        if numbering is None:
            return
        abstract: dict[str, dict[int, tuple[str, str, int]]] = {}
        for node in numbering.iter(f"{_W}abstractNum"):
            levels = abstract.setdefault(node.get(f"{_W}abstractNumId", ""), {})
            for lvl in node.iter(f"{_W}lvl"):
                fmt, text, start = (lvl.find(f"{_W}{name}") for name in ("numFmt", "lvlText", "start"))
                levels[_int(lvl.get(f"{_W}ilvl")) or 0] = (
                    fmt.get(f"{_W}val", "decimal") if fmt is not None else "decimal",
                    text.get(f"{_W}val", "") if text is not None else "",
                    (_int(start.get(f"{_W}val")) if start is not None else None) or 1,
                )
        for num in numbering.iter(f"{_W}num"):
            ref = num.find(f"{_W}abstractNumId")
            for ilvl, level in abstract.get(ref.get(f"{_W}val", "") if ref is not None else "", {}).items():
                self._levels[(num.get(f"{_W}numId", ""), ilvl)] = level

    def label(self, num_id: str, ilvl: int) -> str:
        fmt, text, start = self._levels.get((num_id, ilvl), ("bullet", "", 1))
        counters = self._counters.setdefault(num_id, [0] * 9)
        ilvl = min(max(ilvl, 0), 8)
        counters[ilvl] = counters[ilvl] + 1 if counters[ilvl] else start
        for deeper in range(ilvl + 1, 9):
            counters[deeper] = 0
        if fmt == "bullet":
            return "•"  # the lvlText glyph is usually a private-use Symbol-font character
        if fmt == "none":
            return ""
        label = re.sub(r"%([1-9])", lambda m: _format_number(counters[int(m.group(1)) - 1] or 1,
                                                             self._levels.get((num_id, int(m.group(1)) - 1), (fmt,))[0]),
                       text)
        return label.strip() or f"{_format_number(counters[ilvl], fmt)}."


def _format_number(n: int, fmt: str) -> str:
    if fmt in ("lowerLetter", "upperLetter"):
        letters = ""
        while n > 0:
            n, r = divmod(n - 1, 26)
            letters = chr(ord("a") + r) + letters
        return letters.upper() if fmt == "upperLetter" else letters
    if fmt in ("lowerRoman", "upperRoman"):
        roman = ""
        for value, numeral in ((1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"),
                               (50, "l"), (40, "xl"), (10, "x"), (9, "ix"), (5, "v"), (4, "iv"), (1, "i")):
            while n >= value:
                roman, n = roman + numeral, n - value
        return roman.upper() if fmt == "upperRoman" else roman
    return str(n)


class _Walker:
    def __init__(self, styles: _StyleLevels, numbering: _Numbering, table_prefix: str) -> None:
        self.styles = styles
        self.numbering = numbering
        self.outline = Outline()
        self.tables: dict[str, dict[str, Any]] = {}
        self.table_prefix = table_prefix
        self.page = 0
        self.title = ""
        self._figures = 0

    def walk(self, container: Any) -> None:
        for child in container:
            tag = child.tag
            if tag == f"{_W}p":
                self._paragraph(child)
            elif tag == f"{_W}tbl":
                self._table(child)
            elif tag in (f"{_W}sdt", f"{_W}customXml", f"{_W}ins", f"{_W}smartTag"):
                content = child.find(f"{_W}sdtContent")
                self.walk(content if content is not None else child)

    def _paragraph(self, p: Any) -> None:
        ppr = p.find(f"{_W}pPr")
        style_id = None
        own_level = None
        if ppr is not None:
            style = ppr.find(f"{_W}pStyle")
            style_id = style.get(f"{_W}val") if style is not None else None
            outline = ppr.find(f"{_W}outlineLvl")
            own_level = _int(outline.get(f"{_W}val")) if outline is not None else None
            if ppr.find(f"{_W}pageBreakBefore") is not None and ppr.find(f"{_W}pageBreakBefore").get(f"{_W}val", "true") not in ("0", "false"):
                self.page += 1
        level = own_level if own_level is not None else self.styles.outline_level(style_id)
        if level is not None and not 0 <= level <= 8:
            level = None
        segments = list(_segments(p))
        num = ppr.find(f"{_W}numPr") if ppr is not None else None
        if num is not None and level is None:  # list items; a numbered heading keeps its own text
            num_id = num.find(f"{_W}numId")
            ilvl = num.find(f"{_W}ilvl")
            if num_id is not None and num_id.get(f"{_W}val", "0") != "0":
                label = self.numbering.label(num_id.get(f"{_W}val"), _int(ilvl.get(f"{_W}val")) if ilvl is not None else 0)
                if label and segments and segments[0].strip():
                    segments[0] = f"{label} {segments[0].lstrip()}"
        figures = [_figure_alt(el) for el in p.iter(f"{_W}drawing")]
        for index, text in enumerate(segments):
            if index:
                self.page += 1  # each segment after the first follows a page break
            if not text.strip():
                continue
            if level is not None:
                self.outline.heading(text, level + 1, page=self.page)
            elif self.styles.is_title(style_id) and not self.title:
                self.title = one_line(text)
                self.outline.para(self.title, page=self.page)
            else:
                # Whitespace inside a line is kept: w:t text is verbatim (xml:space),
                # and in code it is indentation.
                self.outline.para(text, page=self.page)
        for alt in figures:
            self._figures += 1
            self.outline.para(f'<figure id="fg-{self.table_prefix[3:]}-{self._figures:04d}">{_escape(alt)}</figure>',
                              page=self.page)

    def _table(self, tbl: Any) -> None:
        rows: list[list[str]] = []
        header_rows = 0
        for tr in tbl.findall(f"{_W}tr"):
            cells: list[str] = []
            for tc in tr.findall(f"{_W}tc"):
                text = one_line(" ".join("".join(_segments(p)) for p in tc.iter(f"{_W}p")))
                tcpr = tc.find(f"{_W}tcPr")
                span = 1
                if tcpr is not None:
                    grid = tcpr.find(f"{_W}gridSpan")
                    span = max(_int(grid.get(f"{_W}val")) or 1, 1) if grid is not None else 1
                    merge = tcpr.find(f"{_W}vMerge")
                    if merge is not None and merge.get(f"{_W}val", "continue") == "continue":
                        text = ""
                cells.append(text)
                cells.extend([""] * (span - 1))
            is_header = tr.find(f"{_W}trPr/{_W}tblHeader") is not None and \
                tr.find(f"{_W}trPr/{_W}tblHeader").get(f"{_W}val", "true") not in ("0", "false")
            if is_header and header_rows == len(rows):
                header_rows += 1
            rows.append(cells)
        if not rows:
            return
        width = max(len(r) for r in rows)
        rows = [r + [""] * (width - len(r)) for r in rows]
        table_id = f"{self.table_prefix}-{len(self.tables) + 1:04d}"
        body = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
        entry: dict[str, Any] = {"dimension": [len(rows), width], "format": "json", "content": body}
        if header_rows:
            entry["table_header"] = json.dumps(rows[:header_rows], ensure_ascii=False)
        self.tables[table_id] = entry
        self.outline.para(f'<table id="{table_id}" format="json">{body}</table>', page=self.page)


def _segments(p: Any) -> Iterator[str]:
    """The paragraph's text, split at explicit page breaks."""
    parts: list[str] = []
    for el in p.iter(f"{_W}t", f"{_M}t", f"{_W}tab", f"{_W}br", f"{_W}cr", f"{_W}noBreakHyphen", f"{_W}softHyphen"):
        tag = el.tag
        if tag in (f"{_W}t", f"{_M}t"):
            # An unexpanded entity reference is a child node; the text after it is its tail.
            parts.append((el.text or "") + "".join(child.tail or "" for child in el))
        elif tag == f"{_W}tab":
            parts.append("\t")
        elif tag == f"{_W}noBreakHyphen":
            parts.append("-")
        elif tag == f"{_W}br" and el.get(f"{_W}type") == "page":
            yield "".join(parts)
            parts = []
        elif tag in (f"{_W}br", f"{_W}cr"):
            parts.append("\n")  # a line break inside the paragraph: code blocks are written this way
    yield "".join(parts)


def _figure_alt(drawing: Any) -> str:
    doc_pr = drawing.find(f".//{_WP}docPr")
    if doc_pr is None:
        return ""
    return one_line(doc_pr.get("descr") or doc_pr.get("title") or doc_pr.get("name") or "")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
