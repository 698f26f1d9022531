"""``.html``: heading blocks with parent chains, tables and figure placeholders.

Driven by libxml2's HTML parser (lxml, with a parser target: events only, no
tree), falling back to the standard library's :class:`html.parser.HTMLParser` when
libxml2 gives up; both are tolerant of unclosed tags. Nothing is ever fetched
(``<img src>``, stylesheets and scripts are only read as attributes, the parser
runs with ``no_network``), entities are decoded by the parser, no DTD is loaded.

The invariant a caller relies on: ``doc.text`` is the block contents joined by a
blank line (:func:`chunking.parsers.build.assemble_structured`), one page.

* ``h1``-``h6`` open blocks; the parent chain is the open shallower headings.
* ``<script>``, ``<style>``, ``<nav>``, ``<head>``, ``<template>``, ``<noscript>``,
  anything with ``role="navigation"``/``"search"`` and Sphinx's ``a.headerlink``
  pilcrows are dropped: page chrome, not content.
* A table becomes one line ``<table id="tb-..." format="html"><thead>...</thead>
  <tbody>...</tbody></table>``: cells keep ``rowspan``/``colspan``, other attributes
  go, cell text is whitespace-collapsed and escaped. The header is the ``<thead>``
  rows, or a first row made only of ``<th>`` (moved into a ``<thead>`` so the stored
  ``table_header`` appears verbatim in the table). A table nested in a cell is
  flattened into that cell's text.
* ``<img>`` and ``<figure>`` become ``<figure id="fg-..." src="...">alt or
  caption</figure>`` paragraphs.
* ``<pre>`` keeps its lines; other text is whitespace-collapsed per paragraph.
* MathML that carries its LaTeX (``<annotation encoding="application/x-tex">``)
  becomes an inline ``<equation format="latex">...</equation>``; other MathML is
  dropped (its presentation markup is not text).
"""

from __future__ import annotations

import codecs
import html as html_lib
import re
from html.parser import HTMLParser
from typing import Any

from lxml import etree

from chunking.model import ParsedDocument
from chunking.parsers.build import Outline, assemble_structured, one_line, strip_control, table_id_prefix
from chunking.parsers.encoding import decode_text
from chunking.limits import LimitExceeded
from chunking.parsers.errors import DocumentError

_SKIP_TAGS = {"script", "style", "nav", "head", "template", "noscript", "svg", "math", "iframe", "object", "select", "button"}
_TEX_ENCODINGS = ("application/x-tex", "application/x-latex", "text/x-tex")
_SKIP_ROLES = {"navigation", "search"}
_HEAD_TAGS = {"title", "meta", "link", "style", "script", "base", "noscript", "template"}
_BLOCK_TAGS = {
    "p", "div", "section", "article", "main", "aside", "header", "footer", "blockquote", "ul", "ol", "li",
    "dl", "dt", "dd", "hr", "address", "form", "fieldset", "details", "summary", "center", "body", "html",
    "caption", "figcaption", "legend",
}
_SPACE_RUN = re.compile(r"\s+")
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
# Stands for <br> inside collected text; private-use, so never in real content.
_BREAK = "\ue000"
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def parse_html(data: bytes, source: str, doc_id: str, sha256: str, *, max_chars: int | None = None) -> ParsedDocument:
    """Parse HTML; with ``max_chars``, stop as soon as the text is sure to exceed it."""
    text, encoding = _decode(data, source)
    builder = _outline(text, table_id_prefix(doc_id, sha256), max_chars=max_chars, source=source)
    drafts = builder.outline.result()
    if not drafts:
        raise DocumentError(source, "no text content in this HTML document")
    return assemble_structured(doc_id=doc_id, source_name=source, fmt="html", sha256=sha256, drafts=drafts,
                               tables=builder.tables, encoding=encoding,
                               metadata={"doc_title": builder.title} if builder.title else None)


def html_table_tag(markup: str, tables: dict[str, dict[str, Any]], prefix: str) -> str:
    """One ``<table format="html">`` tag for a raw HTML table fragment (used by the
    Markdown parser), registering it in ``tables``."""
    builder = _outline(markup, prefix, tables)
    lines = [p.text for d in builder.outline.result() for p in d.paras]
    tags = [line for line in lines if line.startswith("<table ")]
    return tags[0] if tags else one_line(re.sub(r"<[^>]*>", " ", markup))


def _outline(text: str, table_prefix: str, tables: dict[str, dict[str, Any]] | None = None, *,
             max_chars: int | None = None, source: str = "") -> "_HtmlOutline":
    """Run the markup through libxml2's HTML parser (lxml, about 6x faster), or
    through the standard library's when libxml2 gives up on it.

    Both report the same start/end/data events; libxml2 also reports the end tags
    HTML lets authors omit, which the handlers treat like written ones.
    """
    table_count = len(tables) if tables is not None else 0
    budget = _TextBudget(max_chars, source)
    builder = _HtmlOutline(table_prefix, "fg-" + table_prefix[3:], tables=tables, budget=budget)
    try:
        parser = etree.HTMLParser(target=_LxmlEvents(builder), no_network=True, remove_comments=True, remove_pis=True)
        parser.feed(text)
        parser.close()
        builder.finish()
        return builder
    except DocumentError:  # over the budget: the other parser would be too
        raise
    except (etree.LxmlError, ValueError):  # ValueError: text libxml2 will not take (NUL)
        pass
    if tables is not None:  # forget what the failed run registered
        for table_id in list(tables)[table_count:]:
            del tables[table_id]
    builder = _HtmlOutline(table_prefix, "fg-" + table_prefix[3:], tables=tables, budget=_TextBudget(max_chars, source))
    builder.feed(text)
    builder.close()
    return builder


class _LxmlEvents:
    """lxml parser target forwarding to the :class:`HTMLParser` handlers."""

    def __init__(self, builder: "_HtmlOutline") -> None:
        self._builder = builder

    def start(self, tag: str, attrib: Any) -> None:
        if isinstance(tag, str):
            self._builder.handle_starttag(tag.lower(), list(attrib.items()))

    def end(self, tag: str) -> None:
        if isinstance(tag, str):
            self._builder.handle_endtag(tag.lower())

    def data(self, data: str) -> None:
        self._builder.handle_data(data)

    def close(self) -> None:
        return None


def _decode(data: bytes, source: str) -> tuple[str, str]:
    if not data.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        declared = _CHARSET.search(data[:4096])
        if declared:
            name = declared.group(1).decode("ascii", "replace")
            try:
                return data.decode(name), codecs.lookup(name).name
            except (LookupError, UnicodeDecodeError):
                pass  # a wrong declaration: fall back to detection
    return decode_text(data, source)


class _Table:
    def __init__(self) -> None:
        self.rows: list[tuple[str, list[tuple[str, dict[str, str], list[str]]]]] = []  # (section, cells)
        self.section = "tbody"
        self.caption: list[str] = []
        self.in_caption = False

    def new_row(self) -> None:
        self.rows.append((self.section, []))

    def new_cell(self, tag: str, attrs: dict[str, str]) -> None:
        if not self.rows:
            self.new_row()
        keep = {k: v for k, v in attrs.items() if k in ("rowspan", "colspan") and v and v.strip().isdigit()}
        self.rows[-1][1].append((tag, keep, []))

    def add_text(self, text: str) -> None:
        if self.in_caption:
            self.caption.append(text)
        elif self.rows and self.rows[-1][1]:
            self.rows[-1][1][-1][2].append(text)

    def render(self, table_id: str) -> tuple[str, dict[str, Any]]:
        rows = [(section, cells) for section, cells in self.rows if cells]
        head = [r for r in rows if r[0] == "thead"]
        body = [r for r in rows if r[0] != "thead"]
        if not head and body and all(tag == "th" for tag, _, _ in body[0][1]):
            head, body = body[:1], body[1:]
        thead = "<thead>" + "".join(_row(cells) for _, cells in head) + "</thead>" if head else ""
        tbody = "<tbody>" + "".join(_row(cells) for _, cells in body) + "</tbody>" if body else ""
        content = thead + tbody
        cols = max((sum(int(a.get("colspan", "1") or 1) for _, a, _ in cells) for _, cells in rows), default=0)
        entry: dict[str, Any] = {"dimension": [len(rows), cols], "format": "html", "content": content,
                                 "caption": one_line("".join(self.caption))}
        if thead:
            entry["table_header"] = thead
        return f'<table id="{table_id}" format="html">{content}</table>', entry


def _row(cells: list[tuple[str, dict[str, str], list[str]]]) -> str:
    out = []
    for tag, attrs, text in cells:
        attr = "".join(f' {k}="{v.strip()}"' for k, v in sorted(attrs.items()))
        cell = html_lib.escape(one_line("".join(text)), quote=False)
        out.append(f"<{tag}{attr}>{cell}</{tag}>")
    return "<tr>" + "".join(out) + "</tr>"


class _TextBudget:
    """Counts the non-whitespace characters of the text collected so far: a lower
    bound of the final text's length (whitespace collapses, nothing else is
    dropped), so exceeding ``max_chars`` here means the document certainly will."""

    def __init__(self, max_chars: int | None, source: str) -> None:
        self.max_chars, self.source, self.seen = max_chars, source, 0

    def add(self, data: str) -> None:
        if self.max_chars is None:
            return
        self.seen += len(data) - sum(map(len, _SPACE_RUN.findall(data)))
        if self.seen > self.max_chars:
            raise LimitExceeded(self.source, "max_chars", "extracted text", None, f"{self.max_chars} characters")


class _HtmlOutline(HTMLParser):
    def __init__(self, table_prefix: str, figure_prefix: str, tables: dict[str, dict[str, Any]] | None = None,
                 budget: _TextBudget | None = None) -> None:
        super().__init__(convert_charrefs=True)
        self._budget = budget or _TextBudget(None, "")
        self.outline = Outline()
        self.tables: dict[str, dict[str, Any]] = {} if tables is None else tables
        self.title = ""
        self._table_prefix = table_prefix
        self._figure_prefix = figure_prefix
        self._figures = 0
        self._skip: list[str] = []  # tag names of open skipped elements
        self._para: list[str] = []
        self._pre_depth = 0
        self._heading: tuple[int, list[str]] | None = None
        self._table: _Table | None = None
        self._nested_tables = 0
        self._figure: dict[str, list[str] | str] | None = None
        self._in_title = False
        self._tex: list[str] | None = None  # LaTeX of the <math> element being skipped
        self._in_tex = False

    # -- events ---------------------------------------------------------------
    def handle_starttag(self, tag: str, attrs_list: list[tuple[str, str | None]]) -> None:
        attrs = {k: (v or "") for k, v in attrs_list}
        if tag == "title" and (not self._skip or self._skip == ["head"]):
            self._in_title = True
            return
        if self._skip == ["head"] and tag not in _HEAD_TAGS:
            self._skip = []  # "</head>" may be omitted: body content ends the head
        if self._skip:
            if tag == self._skip[-1] or tag in _SKIP_TAGS:
                self._skip.append(tag)
            elif tag == "annotation" and self._tex is not None and attrs.get("encoding", "").lower() in _TEX_ENCODINGS:
                self._in_tex = True
            return
        if (tag in _SKIP_TAGS or attrs.get("role", "").lower() in _SKIP_ROLES
                or (tag == "a" and "headerlink" in attrs.get("class", "").split())):
            self._skip.append(tag)
            if tag == "math" and len(self._skip) == 1:
                self._tex = []
            return
        if self._table is not None:
            self._table_start(tag, attrs)
            return
        if self._heading is not None and tag in ("table", "pre", "figure", *_HEADINGS):
            self._close_heading()  # as an HTML5 parser would: these cannot sit inside a heading line
        if tag in _HEADINGS:
            self._flush()
            self._heading = (_HEADINGS[tag], [])
        elif tag == "table":
            self._flush()
            self._table = _Table()
        elif tag == "pre":
            self._flush()
            self._pre_depth += 1
        elif tag == "br":
            if self._heading:
                self._heading[1].append(" ")
            else:
                self._para.append("\n" if self._pre_depth else _BREAK)
        elif tag == "figure":
            self._flush()
            self._figure = {"src": "", "alt": [], "caption": []}
        elif tag == "img":
            self._image(attrs)
        elif tag in _BLOCK_TAGS:
            self._flush()

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in ("br", "img", "hr", "meta", "link", "input", "col", "area", "source", "wbr"):
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
            return
        if self._skip:
            if tag == "annotation":
                self._in_tex = False
            if tag == self._skip[-1]:
                self._skip.pop()
                if not self._skip and tag == "math":
                    self._emit_equation()
            return
        if self._table is not None:
            self._table_end(tag)
            return
        if tag in _HEADINGS and self._heading:
            self._close_heading()
        elif tag == "pre" and self._pre_depth:
            self._flush()
            self._pre_depth -= 1
        elif tag == "figure" and self._figure is not None:
            figure, self._figure = self._figure, None
            self._emit_figure(str(figure["src"]), one_line("".join(figure["caption"]) or " ".join(figure["alt"])))
        elif tag in _BLOCK_TAGS:
            self._flush()

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title = one_line(self.title + " " + data)
            return
        if self._skip:
            if self._in_tex and self._tex is not None:
                self._tex.append(data)
            return
        self._budget.add(data)
        if self._table is not None:
            self._table.add_text(data)
        elif self._heading is not None:
            self._heading[1].append(data)
        elif self._figure is not None:
            self._figure["caption"].append(data)  # type: ignore[union-attr]
        else:
            self._para.append(data)

    def close(self) -> None:
        super().close()
        self.finish()

    def finish(self) -> None:
        """Close what the markup left open (a heading, a table) and flush the text."""
        if self._heading is not None:
            self._close_heading()
        if self._table is not None:
            self._emit_table()
        self._flush()

    # -- helpers --------------------------------------------------------------
    def _close_heading(self) -> None:
        if self._heading is not None:
            level, parts = self._heading
            self._heading = None
            self.outline.heading("".join(parts), level)

    def _table_start(self, tag: str, attrs: dict[str, str]) -> None:
        table = self._table
        assert table is not None
        if tag == "table":
            self._nested_tables += 1
        elif self._nested_tables:
            if tag in ("td", "th", "tr", "br", "p", "li"):
                table.add_text(" ")
        elif tag in ("thead", "tbody", "tfoot"):
            table.section = tag
        elif tag == "tr":
            table.new_row()
        elif tag in ("td", "th"):
            table.new_cell(tag, attrs)
        elif tag == "caption":
            table.in_caption = True
        elif tag == "img":
            table.add_text(attrs.get("alt", ""))
        elif tag in ("br", "p", "li", "div"):
            table.add_text(" ")

    def _table_end(self, tag: str) -> None:
        table = self._table
        assert table is not None
        if tag == "table":
            if self._nested_tables:
                self._nested_tables -= 1
            else:
                self._emit_table()
        elif tag == "caption":
            table.in_caption = False
        elif tag in ("thead", "tfoot", "tbody") and not self._nested_tables:
            table.section = "tbody"

    def _emit_table(self) -> None:
        table, self._table = self._table, None
        self._nested_tables = 0
        if table is None or not any(cells for _, cells in table.rows):
            return
        table_id = f"{self._table_prefix}-{len(self.tables) + 1:04d}"
        tag, entry = table.render(table_id)
        self.tables[table_id] = entry
        self.outline.para(tag)

    def _image(self, attrs: dict[str, str]) -> None:
        if self._figure is not None:
            self._figure["src"] = self._figure["src"] or attrs.get("src", "")
            self._figure["alt"].append(attrs.get("alt", ""))  # type: ignore[union-attr]
            return
        if self._heading is not None:
            self._heading[1].append(attrs.get("alt", ""))
            return
        self._flush()
        self._emit_figure(attrs.get("src", ""), one_line(attrs.get("alt", "")))

    def _emit_equation(self) -> None:
        """A MathML formula that carries its LaTeX becomes an inline equation tag."""
        tex, self._tex, self._in_tex = one_line("".join(self._tex or [])), None, False
        if not tex:
            return
        tag = f'<equation format="latex">{html_lib.escape(tex, quote=False)}</equation>'
        if self._table is not None:
            self._table.add_text(tag)
        elif self._heading is not None:
            self._heading[1].append(tex)
        else:
            self._para.append(tag)

    def _emit_figure(self, src: str, caption: str) -> None:
        self._figures += 1
        src_attr = f' src="{html_lib.escape(one_line(src))}"' if src else ""
        self.outline.para(f'<figure id="{self._figure_prefix}-{self._figures:04d}"{src_attr}>'
                          f"{html_lib.escape(caption, quote=False)}</figure>")

    def _flush(self) -> None:
        if not self._para:
            return
        raw = strip_control("".join(self._para))
        self._para = []
        if self._pre_depth:
            self.outline.para(raw)
        else:
            for line in raw.split(_BREAK):
                self.outline.para(one_line(line))
