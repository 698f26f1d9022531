"""P's reference dropping (``drop_references``) and title blocks (``is_title_block``), native and compat."""

from __future__ import annotations

import json
import logging

import pytest

from chunking.compat import lightrag as L
from chunking.model import Block, Page, ParsedDocument
from chunking.sidecar import read_blocks_jsonl, write_sidecars
from chunking.strategies.paragraph import ParagraphConfig, chunk_paragraph, references
from chunking.tokenizers import CharTokenizer


def _doc(*blocks: tuple[str, str], title: int | None = None) -> ParsedDocument:
    """A document of ``(heading, body)`` blocks laid out one after another."""
    made, text = [], ""
    for i, (heading, body) in enumerate(blocks):
        content = (f"# {heading}\n{body}" if heading else body)
        start = len(text) + (2 if text else 0)
        text += ("\n\n" if text else "") + content
        made.append(Block(block_id=f"b{i}", index=i, heading=heading, level=0 if i == title else 1, content=content,
                          char_start=start, char_end=start + len(content), is_title_block=i == title))
    return ParsedDocument(doc_id="paper", text=text, pages=[Page(page_num=0, char_offset=0, text=text)], blocks=made)


PAPER = _doc(("Introduction", "INTRO_MARKER intro body."), ("Method", "METHOD_MARKER method body."),
             ("References", "REF_MARKER [1] Foo, 2020."), ("Appendix", "APPENDIX_MARKER appendix body."))


def _text(chunks) -> str:
    return "\n".join(c.text if hasattr(c, "text") else c["content"] for c in chunks)


def _native(doc, **config):
    return chunk_paragraph(doc, ParagraphConfig(chunk_token_size=60, chunk_overlap_token_size=5, **config), CharTokenizer())


def _write(tmp_path, doc) -> str:
    return str(write_sidecars(doc, tmp_path)[0])


# --------------------------------------------------------------------------- native


def test_off_by_default_keeps_the_references():
    assert "REF_MARKER" in _text(_native(PAPER))


def test_drop_references_leaves_out_only_the_reference_blocks():
    chunks = _native(PAPER, drop_references=True)
    body = _text(chunks)
    assert "REF_MARKER" not in body
    assert all(m in body for m in ("INTRO_MARKER", "METHOD_MARKER", "APPENDIX_MARKER"))
    assert "b2" not in {i for c in chunks for i in c.block_ids}


def test_tail_window_limits_the_search():
    # Last 1 block is the Appendix: References lies outside the window and stays.
    assert "REF_MARKER" in _text(_native(PAPER, drop_references=True, references_tail_n=1))
    assert "REF_MARKER" not in _text(_native(PAPER, drop_references=True, references_tail_n=2))


@pytest.mark.parametrize("heading,dropped", [
    ("References", True), ("REFERENCES", True), ("References and notes", True), ("Bibliography", True),
    ("参考文献", True), ("参考文献（中文）", True), ("Referenced works", False), ("Further references", False),
])
def test_heading_prefix_rules(heading, dropped):
    doc = _doc(("Body", "BODY_MARKER text."), (heading, "TARGET_MARKER entries."))
    assert ("TARGET_MARKER" not in _text(_native(doc, drop_references=True))) == dropped


def test_configured_headings():
    doc = _doc(("Body", "BODY_MARKER text."), ("Works Cited", "CITED_MARKER entries."), ("References", "REF_MARKER x."))
    body = _text(_native(doc, drop_references=True, references_headings=("Works Cited",)))
    assert "CITED_MARKER" not in body and "REF_MARKER" in body


def test_never_drops_everything(caplog):
    doc = _doc(("References", "REF_A entries."), ("Bibliography", "REF_B entries."))
    with caplog.at_level(logging.WARNING, logger="chunking.strategies.paragraph"):
        body = _text(_native(doc, drop_references=True))
    assert "REF_A" in body and "REF_B" in body
    assert any("would drop every block" in r.message for r in caplog.records)


def test_config_rejects_a_negative_window_and_no_headings():
    with pytest.raises(ValueError):
        ParagraphConfig(references_tail_n=-1)
    with pytest.raises(ValueError):
        ParagraphConfig(references_headings=())


# --------------------------------------------------------------------------- compat: LightRAG's env settings


def test_compat_drop_references_argument_and_env_switch(tmp_path, monkeypatch):
    path = _write(tmp_path, PAPER)
    monkeypatch.delenv("CHUNK_P_DROP_REFERENCES", raising=False)
    assert "REF_MARKER" in _text(L.chunking_by_paragraph_semantic(CharTokenizer(), "", 60, blocks_path=path))
    assert "REF_MARKER" not in _text(
        L.chunking_by_paragraph_semantic(CharTokenizer(), "", 60, blocks_path=path, drop_references=True))
    monkeypatch.setenv("CHUNK_P_DROP_REFERENCES", "true")
    assert "REF_MARKER" not in _text(L.chunking_by_paragraph_semantic(CharTokenizer(), "", 60, blocks_path=path))
    # An explicit argument wins over the environment.
    assert "REF_MARKER" in _text(
        L.chunking_by_paragraph_semantic(CharTokenizer(), "", 60, blocks_path=path, drop_references=False))


def test_compat_reads_tail_and_headings_live_from_the_environment(tmp_path, monkeypatch):
    path = _write(tmp_path, PAPER)
    run = lambda: _text(L.chunking_by_paragraph_semantic(CharTokenizer(), "", 60, blocks_path=path,  # noqa: E731
                                                         drop_references=True))
    monkeypatch.setenv("CHUNK_P_REFERENCES_TAIL_N", "1")
    assert "REF_MARKER" in run()
    monkeypatch.setenv("CHUNK_P_REFERENCES_TAIL_N", "2")  # same call, only the environment changed
    assert "REF_MARKER" not in run()
    monkeypatch.delenv("CHUNK_P_REFERENCES_TAIL_N")
    monkeypatch.setenv("CHUNK_P_REFERENCES_HEADINGS", "Appendix | Nothing")
    body = run()
    assert "APPENDIX_MARKER" not in body and "REF_MARKER" in body


def test_compat_invalid_tail_window_falls_back_to_all_blocks_with_a_warning(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CHUNK_P_REFERENCES_TAIL_N", "-3")
    with caplog.at_level(logging.WARNING, logger="lightrag"):
        assert references.settings_from_env() == (references.DEFAULT_REFERENCES_HEADINGS, 0)
    monkeypatch.setenv("CHUNK_P_REFERENCES_TAIL_N", "two")
    path = _write(tmp_path, PAPER)
    with caplog.at_level(logging.WARNING, logger="lightrag"):
        body = _text(L.chunking_by_paragraph_semantic(CharTokenizer(), "", 60, blocks_path=path, drop_references=True))
    assert "REF_MARKER" not in body
    assert any(r.name == "lightrag" and "CHUNK_P_REFERENCES_TAIL_N" in r.message for r in caplog.records)


# --------------------------------------------------------------------------- title blocks


TITLED = _doc(("A Study of Things", "TITLE_BODY by the authors."), ("Introduction", "INTRO_MARKER " + "word " * 12),
              title=0)


def test_sidecar_carries_is_title_block_only_on_the_title(tmp_path):
    path = _write(tmp_path, TITLED)
    lines = [json.loads(line) for line in open(path, encoding="utf-8").read().splitlines()[1:]]
    assert [line.get("is_title_block") for line in lines] == [True, None]
    assert [b.is_title_block for b in read_blocks_jsonl(path)] == [True, False]


def test_title_block_keeps_level_0_in_the_chunk_heading(tmp_path):
    chunks = chunk_paragraph(TITLED, ParagraphConfig(chunk_token_size=60, chunk_overlap_token_size=0), CharTokenizer())
    title = next(c for c in chunks if "TITLE_BODY" in c.text)
    assert title.metadata["heading"]["level"] == 0 and title.metadata["heading"]["heading"] == "A Study of Things"
    intro = next(c for c in chunks if "INTRO_MARKER" in c.text and "TITLE_BODY" not in c.text)
    assert intro.metadata["heading"]["level"] == 1
    out = L.chunking_by_paragraph_semantic(CharTokenizer(), "", 60, blocks_path=_write(tmp_path, TITLED))
    assert next(d for d in out if "TITLE_BODY" in d["content"])["heading"]["level"] == 0


def test_level_0_without_the_flag_is_level_1():
    untitled = TITLED.model_copy(update={"blocks": [b.model_copy(update={"is_title_block": False})
                                                    for b in TITLED.blocks]})
    chunks = chunk_paragraph(untitled, ParagraphConfig(chunk_token_size=60, chunk_overlap_token_size=0),
                             CharTokenizer())
    assert next(c for c in chunks if "TITLE_BODY" in c.text).metadata["heading"]["level"] == 1
