"""``chunking.compat.lightrag``: LightRAG's chunker entry points, signatures and dicts (compatibility.md §2)."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from chunking import default_tokenizer
from chunking.compat import lightrag as L
from chunking.tokenizers import CharTokenizer

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "paragraph"
P_KEYS = {"tokens", "content", "chunk_order_index", "heading"}


class BareTokenizer:
    """Only ``encode``/``decode``, like LightRAG's Tokenizer: nothing may need more."""

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, tokens: list[int]) -> str:
        return "".join(map(chr, tokens))


@pytest.fixture(params=["bare", "char", "cl100k"])
def tok(request):
    return {"bare": BareTokenizer, "char": CharTokenizer}.get(request.param, default_tokenizer)()


def test_signatures_match_lightrag():
    p = inspect.signature(L.chunking_by_paragraph_semantic)
    assert list(p.parameters)[:3] == ["tokenizer", "content", "chunk_token_size"]
    assert p.parameters["chunk_token_size"].default == 2000
    assert {k: p.parameters[k].default for k in ("blocks_path", "chunk_overlap_token_size", "doc_id")} == {
        "blocks_path": None, "chunk_overlap_token_size": 100, "doc_id": None}
    assert all(p.parameters[k].kind is inspect.Parameter.KEYWORD_ONLY for k in ("blocks_path", "chunk_overlap_token_size", "doc_id"))
    r = inspect.signature(L.chunking_by_recursive_character)
    assert r.parameters["chunk_token_size"].default == 1200
    assert r.parameters["chunk_overlap_token_size"].default == 100 and r.parameters["separators"].default is None
    v = inspect.signature(L.chunking_by_semantic_vector)
    assert v.parameters["chunk_token_size"].default == 1200 and v.parameters["embedding_func"].default is None
    assert v.parameters["breakpoint_threshold_type"].default == "percentile"
    assert v.parameters["buffer_size"].default == 1 and v.parameters["min_chunk_size"].default is None


# --------------------------------------------------------------------------- R


def test_recursive_character_dicts_and_exact_spans(tok):
    text = "First paragraph.\n\nSecond paragraph with more words in it.\nA new line here.\n\n" + "word " * 80
    out = L.chunking_by_recursive_character(tok, text, 40, chunk_overlap_token_size=5)
    assert len(out) > 2
    for i, d in enumerate(out):
        assert set(d) == {"tokens", "content", "chunk_order_index", "_source_span"}
        assert d["chunk_order_index"] == i
        assert text[d["_source_span"]["start"] : d["_source_span"]["end"]] == d["content"]
        assert d["tokens"] == len(tok.encode(d["content"])) <= 40
        assert d["content"] == d["content"].strip()


def test_recursive_character_default_separators_are_the_plain_cascade():
    text = "aaaa。bbbb。cccc。dddd"
    # The plain cascade has no CJK punctuation: with no space or newline the text is cut by tokens.
    plain = L.chunking_by_recursive_character(CharTokenizer(), text, 10, chunk_overlap_token_size=0)
    cjk = L.chunking_by_recursive_character(CharTokenizer(), text, 10, chunk_overlap_token_size=0,
                                            separators=["\n\n", "\n", "。", ""])
    assert [d["content"] for d in plain] == ["aaaa。bbbb。", "cccc。dddd"]
    assert [d["content"] for d in cjk] == ["aaaa。bbbb", "。cccc。dddd"]  # separator kept at the piece start


# LangChain's RecursiveCharacterTextSplitter (what LightRAG's R wraps) on inputs where chunkyard's
# native recursive differs; the expected chunks are that algorithm's (its source in the search
# index, run with these tokenizers), quirks included.
@pytest.mark.parametrize("tokenizer, text, size, overlap, separators, expected", [
    # A piece is measured with its leading separator, and split further at >= the size:
    # "\n\na b c d e f g h i j" is 11 tokens (native: its 10 stripped ones fit whole).
    ("cl100k", "Intro.\n\na b c d e f g h i j", 10, 2, None, ["Intro.", "a b c d e f g h i", "h i j"]),
    ("char", "bb\n\nbb", 2, 0, None, ["bb", "b", "b"]),
    # "\n\n\n" at "\n\n" is one piece (re.split consumes the first occurrence).
    ("char", "bb\n\n\nbb", 2, 1, None, ["bb", "b", "bb"]),
    # Windows and overlaps decided by the pieces' summed counts: a chunk can repeat the last.
    ("char", "\n\nbb", 2, 1, None, ["b", "bb"]),
    # No separator occurs and none is left: the piece as it is, over the size.
    ("char", "abcdefgh", 3, 0, ["\n"], ["abcdefgh"]),
    ("char", "abcdefgh", 3, 0, ["\n", ""], ["abc", "def", "gh"]),
    # An overlap equal to the size is allowed.
    ("char", "ab cd ef", 5, 5, None, ["ab cd", "ef"]),
])
def test_recursive_character_is_langchains_splitter(tokenizer, text, size, overlap, separators, expected):
    tok = default_tokenizer() if tokenizer == "cl100k" else CharTokenizer()
    out = L.chunking_by_recursive_character(tok, text, size, chunk_overlap_token_size=overlap, separators=separators)
    assert [d["content"] for d in out] == expected
    for d in out:
        assert text[d["_source_span"]["start"]:d["_source_span"]["end"]] == d["content"]
        assert d["tokens"] == len(tok.encode(d["content"]))


def test_recursive_character_takes_its_sizes_as_lightrag_does():
    tok = CharTokenizer()
    # max(int(size), 1) and max(int(overlap), 0); the default overlap (100) with a size of 100 is fine.
    assert [d["content"] for d in L.chunking_by_recursive_character(tok, "ab cd ef gh ij", 100)] == ["ab cd ef gh ij"]
    assert [d["content"] for d in L.chunking_by_recursive_character(
        tok, "ab cd ef gh ij", "5", chunk_overlap_token_size="2")] == ["ab cd", "ef", "gh", "ij"]
    assert [d["content"] for d in L.chunking_by_recursive_character(
        tok, "ab cd", 0, chunk_overlap_token_size=-3)] == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match=r"larger chunk overlap \(4\) than chunk size \(3\)"):
        L.chunking_by_recursive_character(tok, "ab cd", 3, chunk_overlap_token_size=4)


def test_recursive_character_empty_input():
    assert L.chunking_by_recursive_character(CharTokenizer(), "") == []
    assert L.chunking_by_recursive_character(CharTokenizer(), "   \n ") == []


# --------------------------------------------------------------------------- P


def test_paragraph_semantic_dicts_with_heading_and_sidecar(tok):
    path = FIXTURES / "seed_example.blocks.jsonl"
    out = L.chunking_by_paragraph_semantic(tok, "unused", 400, blocks_path=str(path))
    assert out
    ids = [json.loads(line).get("blockid") for line in path.read_text().splitlines()[1:]]
    seen = []
    for i, d in enumerate(out):
        assert set(d) == P_KEYS | {"sidecar"}
        assert d["chunk_order_index"] == i and d["tokens"] == len(tok.encode(d["content"])) <= 400
        assert set(d["heading"]) == {"level", "heading", "parent_headings"}
        sidecar = d["sidecar"]
        assert sidecar["type"] == "block" and sidecar["id"] == sidecar["refs"][0]["id"]
        assert all(ref["type"] == "block" for ref in sidecar["refs"])
        seen += [ref["id"] for ref in sidecar["refs"]]
    # Every block is referenced, in document order (a block cut into parts by each of its parts).
    assert list(dict.fromkeys(seen)) == ids
    assert [ids.index(i) for i in seen] == sorted(ids.index(i) for i in seen)


def test_paragraph_semantic_without_block_ids_has_no_sidecar(tok):
    out = L.chunking_by_paragraph_semantic(tok, "", blocks_path=FIXTURES / "no_ids.blocks.jsonl")
    assert out and all(set(d) == P_KEYS for d in out)


def test_paragraph_semantic_reads_tables_json_beside_the_blocks(tok, tmp_path):
    src = FIXTURES / "tables_json.blocks.jsonl"
    table = next(line for line in json.loads(src.read_text().splitlines()[1])["content"].split("\n") if line.startswith("<table"))
    n = len(tok.encode(table)) // 2
    with_header = L.chunking_by_paragraph_semantic(tok, "", n, blocks_path=src)
    header = '["Test", "Condition", "Duration", "Result"]'
    assert sum(d["content"].count(header) for d in with_header) >= 3  # re-injected into later slices
    alone = tmp_path / "tables_json.blocks.jsonl"
    shutil.copy(src, alone)  # no .tables.json beside it: no header to re-inject
    without = L.chunking_by_paragraph_semantic(tok, "", n, blocks_path=alone)
    assert sum(d["content"].count(header) for d in without) == 1


def test_paragraph_semantic_header_mismatch_raises(tok):
    with pytest.raises(ValueError, match="corrupted"):
        L.chunking_by_paragraph_semantic(tok, "", 300, blocks_path=FIXTURES / "mismatch_html.blocks.jsonl")


@pytest.mark.parametrize("blocks_path", [None, "", "missing", "empty"])
def test_paragraph_semantic_degrades_to_r_without_a_sidecar(tok, blocks_path, caplog, tmp_path):
    path = {"missing": tmp_path / "nope.blocks.jsonl", "empty": FIXTURES / "empty.blocks.jsonl"}.get(blocks_path, blocks_path)
    content = "Plain text without any sidecar. " * 30
    with caplog.at_level(logging.WARNING, logger="lightrag"):
        out = L.chunking_by_paragraph_semantic(tok, content, 50, blocks_path=path, chunk_overlap_token_size=10)
    assert any("fallback to recursive_character" in r.message for r in caplog.records)
    assert out == L.chunking_by_recursive_character(tok, content, 50, chunk_overlap_token_size=10)


def test_paragraph_semantic_overlap_bounded_below_size(tok):
    out = L.chunking_by_paragraph_semantic(tok, "x " * 50, 10, blocks_path=None, chunk_overlap_token_size=500)
    assert out and all(d["tokens"] <= 10 for d in out)


# --------------------------------------------------------------------------- V


TOPICS = (["The cat sat on the mat. Cats purr when happy. A kitten chased the yarn."] +
          ["Stocks fell sharply today. The market index dropped. Investors sold shares."])


def _topic_embedding(texts):
    # Two obvious topics: animal sentences point one way, finance sentences the other.
    animal = ("cat", "purr", "kitten", "yarn", "mat")
    return np.array([[1.0, 0.0] if any(w in t.lower() for w in animal) else [0.0, 1.0] for t in texts])


def test_semantic_vector_breaks_between_topics(tok):
    text = " ".join(TOPICS)
    out = asyncio.run(L.chunking_by_semantic_vector(tok, text, 1200, embedding_func=_topic_embedding,
                                                    breakpoint_threshold_type="percentile",
                                                    breakpoint_threshold_amount=50, buffer_size=0))
    assert [d["content"] for d in out] == TOPICS
    for i, d in enumerate(out):
        assert set(d) == {"tokens", "content", "chunk_order_index", "_source_span"} and d["chunk_order_index"] == i
        assert text[d["_source_span"]["start"] : d["_source_span"]["end"]] == d["content"]


# LangChain's SemanticChunker as LightRAG runs it (its source in the search index, run locally on
# these inputs with this embedding), quirks included; chunkyard's native semantic differs on each.
@pytest.mark.parametrize("text, size, options, expected", [
    # min_chunk_size counts the characters of the group's sentences joined by " ", and a breakpoint
    # whose group is shorter is skipped: the group runs on (native: tokens, the weaker side).
    ("The cat sat. Cats purr. Stocks fell sharply today. Markets dropped a lot. The cat napped.", 1200,
     {"min_chunk_size": 30},
     ["The cat sat. Cats purr. Stocks fell sharply today. Markets dropped a lot.", "The cat napped."]),
    # LightRAG's default sentence regex cuts after "Dr." (native: the segmenter keeps it).
    ("Dr. Smith keeps a cat. Cats purr. Stocks fell. Markets dropped.", 1200, {},
     ["Dr.", "Smith keeps a cat. Cats purr.", "Stocks fell. Markets dropped."]),
    # gradient on two sentences: each is a chunk (native: one distance, no split).
    ("The cat sat. Stocks fell.", 1200, {"breakpoint_threshold_type": "gradient"}, ["The cat sat.", "Stocks fell."]),
    # A group over the size goes to R whole, which cuts inside its sentence (native: at sentence ends).
    ("The cat sat on the mat and purred at the kitten all afternoon long. Stocks fell. Markets dropped.", 8, {},
     ["The cat sat on the mat and", "purred at the kitten all afternoon", "long.", "Stocks fell. Markets dropped."]),
    # re.split returns a pattern's captured groups among the pieces, and LangChain takes them for
    # sentences; a backreference works as there.
    ("The cat sat.. Cats purr.. Stocks fell.. Markets dropped..", 1200, {"sentence_split_regex": r"(\.)\1\s+"},
     ["The cat sat", ".", "Cats purr", ".. Stocks fell.. Markets dropped.."]),
])
def test_semantic_vector_is_langchains_semantic_chunker(text, size, options, expected):
    tok = default_tokenizer()  # cl100k: the sizes above are its tokens
    options = {"breakpoint_threshold_type": "percentile", "breakpoint_threshold_amount": 50, "buffer_size": 0,
               **options}
    out = L.chunking_by_semantic_vector_sync(tok, text, size, embedding_func=_topic_embedding, **options)
    assert [d["content"] for d in out] == expected
    for d in out:
        assert text[d["_source_span"]["start"] : d["_source_span"]["end"]] == d["content"]


def test_semantic_vector_awaits_an_async_embedding_func(tok):
    async def embed(texts):
        return _topic_embedding(texts)

    text = " ".join(TOPICS)
    out = asyncio.run(L.chunking_by_semantic_vector(tok, text, 1200, embedding_func=embed,
                                                    breakpoint_threshold_amount=50, buffer_size=0))
    assert [d["content"] for d in out] == TOPICS
    # The sync helper beside it awaits the coroutine itself.
    sync = L.chunking_by_semantic_vector_sync(tok, text, 1200, embedding_func=embed, breakpoint_threshold_amount=50, buffer_size=0)
    assert sync == out


def test_semantic_vector_is_a_coroutine_function_and_runs_async_embeddings_on_the_callers_loop(tok):
    assert inspect.iscoroutinefunction(L.chunking_by_semantic_vector)
    loops = []

    async def embed(texts):
        loops.append(asyncio.get_running_loop())
        return _topic_embedding(texts)

    async def caller():
        out = await L.chunking_by_semantic_vector(tok, " ".join(TOPICS), 1200, embedding_func=embed,
                                                  breakpoint_threshold_amount=50, buffer_size=0)
        return out, asyncio.get_running_loop()

    out, loop = asyncio.run(caller())
    assert [d["content"] for d in out] == TOPICS
    assert loops and all(seen is loop for seen in loops)


def test_semantic_vector_without_embedding_is_r_without_overlap(tok, caplog):
    text = "Sentence number one. " * 40
    with caplog.at_level(logging.WARNING, logger="lightrag"):
        out = asyncio.run(L.chunking_by_semantic_vector(tok, text, 50))
    assert out == L.chunking_by_recursive_character(tok, text, 50, chunk_overlap_token_size=0)
    assert any("fallback to recursive_character" in r.message for r in caplog.records)
    assert asyncio.run(L.chunking_by_semantic_vector(tok, "  ", 50, embedding_func=_topic_embedding)) == []


def test_fixed_token_is_the_f_strategy_under_the_file_chunker_contract():
    """LightRAG's ``chunking_by_fixed_token``: F with the standard prefix and keyword-only knobs;
    ``_source_span`` only on request, as there."""
    import inspect

    params = inspect.signature(L.chunking_by_fixed_token).parameters
    assert list(params) == ["tokenizer", "content", "chunk_token_size", "chunk_overlap_token_size",
                            "split_by_character", "split_by_character_only", "_emit_source_span"]
    assert [p.kind.name for p in params.values()][3:] == ["KEYWORD_ONLY"] * 4
    assert [params[n].default for n in list(params)[2:]] == [1200, 100, None, False, False]
    tok = CharTokenizer()
    text = "alpha beta gamma delta\n\nepsilon zeta eta theta iota kappa"
    plain = L.chunking_by_fixed_token(tok, text, 12, chunk_overlap_token_size=3)
    spans = L.chunking_by_token_size(tok, text, None, False, 3, 12)
    assert plain == [{k: v for k, v in d.items() if k != "_source_span"} for d in spans]
    assert all("_source_span" not in d for d in plain)
    assert L.chunking_by_fixed_token(tok, text, 12, chunk_overlap_token_size=3, _emit_source_span=True) == spans
    by_char = L.chunking_by_fixed_token(tok, text, 40, split_by_character="\n\n", split_by_character_only=True)
    assert [d["content"] for d in by_char] == ["alpha beta gamma delta", "epsilon zeta eta theta iota kappa"]


def test_paragraph_semantics_character_splits_are_lightrags_r(tmp_path):
    """The seed names P's long-body fallback: chunking_by_recursive_character, LightRAG's R, which
    compat runs as LangChain's splitter (test_recursive_character_is_langchains_splitter). Until
    session 30 compat P cut there with the native recursive, whose overlap differs."""
    from chunking.model import Block
    from chunking.strategies.paragraph import split_paragraph_semantic

    tok = CharTokenizer()
    content = ("\n \n\n d d be \n gamma. alpha gamma. alpha \n\n d alpha d \n gamma. alpha \n \n\n gamma. \n\n "
               + "longwordwithoutbreaks" * 2 + " gamma.")
    path = tmp_path / "one.blocks.jsonl"
    path.write_text(json.dumps({"type": "meta", "format": "1.0"}) + "\n" + json.dumps(
        {"type": "content", "heading": "", "level": 0, "parent_headings": [], "content": content}) + "\n")
    out = [d["content"] for d in L.chunking_by_paragraph_semantic(tok, content, 26, blocks_path=path,
                                                                   chunk_overlap_token_size=10)]

    def pieces(reference: bool) -> list[str]:
        return [p.text for p in split_paragraph_semantic([Block(index=0, content=content)], tok, chunk_token_size=26,
                                                         chunk_overlap_token_size=10, separators=L.PLAIN_SEPARATORS,
                                                         reference_recursive=reference)]

    assert out == pieces(True) != pieces(False)
    assert "alpha\n\n d alpha d" in out  # LangChain's overlap: the whole last piece that fits, "alpha", kept
