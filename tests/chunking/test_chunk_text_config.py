"""chunk_text's config ergonomics (issue 11.9): one name for the token cap, defaults
that scale with the user's size, no silent semantic fallback, errors naming valid fields."""

import numpy as np
import pytest

from chunking import chunk_text
from chunking.strategies import StrategyConfigError, config_field_names, get_strategy, strategy_names
from chunking.strategies.semantic import MissingEmbedderError
from chunking.tokenizers import CharTokenizer

CHAR = CharTokenizer()
PROSE = " ".join(f"Sentence number {i} talks about a topic of its own." for i in range(80))


@pytest.mark.parametrize("strategy", ["recursive", "sentence", "sentence_window", "paragraph"])
def test_every_token_capped_strategy_accepts_chunk_token_size_as_its_cap(strategy):
    chunks = chunk_text(PROSE, strategy=strategy, tokenizer=CHAR, chunk_token_size=120)
    assert len(chunks) > 3
    assert max(c.token_count for c in chunks) <= 120


def test_common_name_maps_to_the_strategys_own_field():
    assert get_strategy("sentence").parse_config({"chunk_token_size": 200}).max_tokens_per_section == 200
    window = get_strategy("sentence_window").parse_config({"chunk_token_size": 200, "chunk_overlap_token_size": 20})
    assert (window.unit, window.chunk_size, window.max_size, window.overlap) == ("tokens", 200, 200, 20)
    # Same cap from the adr preset (chars by default): the common name means tokens.
    adr = get_strategy("sentence_window").parse_config({"preset": "adr", "chunk_token_size": 300})
    assert (adr.unit, adr.chunk_size, adr.max_size) == ("tokens", 300, 300)


def test_common_name_and_own_field_together_or_contradicting_unit_are_rejected():
    with pytest.raises(StrategyConfigError, match="chunk_token_size or max_tokens_per_section, not both"):
        get_strategy("sentence").parse_config({"chunk_token_size": 200, "max_tokens_per_section": 300})
    with pytest.raises(StrategyConfigError, match="unit='tokens'.*unit='chars'"):
        get_strategy("sentence_window").parse_config({"chunk_token_size": 200, "unit": "chars"})


def test_unknown_field_error_names_the_valid_fields():
    with pytest.raises(StrategyConfigError) as err:
        chunk_text(PROSE, strategy="simple", chunk_token_size=200)
    message = str(err.value)
    assert "strategy 'simple' has no config field(s) 'chunk_token_size'" in message
    assert "valid fields: max_object_length" in message
    with pytest.raises(StrategyConfigError, match=r"'chunk_sise'.*valid fields: .*max_tokens_per_section.*chunk_token_size"):
        chunk_text(PROSE, strategy="sentence", chunk_sise=200)


def test_sentence_window_default_overlap_scales_with_the_users_chunk_size():
    config = get_strategy("sentence_window").parse_config({"chunk_size": 15})
    assert config.overlap == 15 * 128 // 512 and config.max_size == 15
    assert get_strategy("sentence_window").parse_config({"chunk_size": 512}).overlap == 128
    chunks = chunk_text("One two. Three four five. Six seven. Eight nine ten. " * 4, strategy="sentence_window",
                        tokenizer=CHAR, chunk_size=15, allow_oversize_sentences=True)
    assert chunks
    # Only an explicit overlap that does not fit is an error.
    with pytest.raises(ValueError, match=r"overlap \(20\) must be smaller than chunk_size \(15\)"):
        get_strategy("sentence_window").parse_config({"chunk_size": 15, "overlap": 20})


@pytest.mark.parametrize("strategy", ["recursive", "paragraph", "token"])
def test_a_default_overlap_is_at_most_a_quarter_of_the_size_and_only_a_set_one_is_refused(strategy):
    """README, "Using the library": a size at or under the default overlap (100) used to fail on
    an overlap the caller never set (found by a README audit, session 27); then the default stayed
    whole down to 101 tokens (99% overlap) and fell to 8 at 100 (a README audit, session 28)."""
    spec = get_strategy(strategy)
    overlaps = {size: spec.parse_config({"chunk_token_size": size}).chunk_overlap_token_size
                for size in (1, 3, 4, 50, 100, 101, 200, 399, 400, 401, 1200)}
    assert overlaps == {1: 0, 3: 0, 4: 1, 50: 12, 100: 25, 101: 25, 200: 50, 399: 99, 400: 100, 401: 100, 1200: 100}
    # Grows with the size, one token at a time at most: no jump.
    steps = [spec.parse_config({"chunk_token_size": n}).chunk_overlap_token_size for n in range(1, 1300)]
    assert all(0 <= b - a <= 1 for a, b in zip(steps, steps[1:]))
    assert spec.parse_config({}).chunk_overlap_token_size == 100
    chunks = chunk_text("word " * 2000, strategy, tokenizer=CharTokenizer(), chunk_token_size=60)
    assert chunks and max(c.token_count for c in chunks) <= 60
    with pytest.raises(ValueError, match=r"chunk_overlap_token_size \(100\) must be smaller than chunk_token_size \(100\)"):
        spec.parse_config({"chunk_token_size": 100, "chunk_overlap_token_size": 100})


def test_semantic_without_embedder_is_an_error_naming_how_to_pass_one():
    with pytest.raises(MissingEmbedderError, match=r"embedder=.*allow_recursive_fallback=True"):
        chunk_text(PROSE, strategy="semantic", tokenizer=CHAR, chunk_token_size=200)


def test_semantic_fallback_only_when_asked_and_it_does_not_change_the_config_hash():
    from chunking.strategies import config_hash

    chunks = chunk_text(PROSE, strategy="semantic", tokenizer=CHAR, chunk_token_size=200, allow_recursive_fallback=True)
    assert chunks and all(c.metadata["fallback"].startswith("recursive_character") for c in chunks)
    spec = get_strategy("semantic")
    assert config_hash(spec.parse_config({"allow_recursive_fallback": True})) == config_hash(spec.default_config())


def test_semantic_with_an_embedder_uses_it():
    class Hashing:
        def __init__(self):
            self.embedded: list[str] = []

        def embed(self, texts):
            self.embedded += texts
            return np.array([[len(t) % 7 + 1.0, t.count("1") + 1.0] for t in texts])

    embedder = Hashing()
    chunks = chunk_text(PROSE, strategy="semantic", tokenizer=CHAR, embedder=embedder, chunk_token_size=200)
    assert chunks and not any("fallback" in c.metadata for c in chunks)
    assert embedder.embedded and all(text in PROSE for text in embedder.embedded)  # its sentences went to it


def test_config_field_names_list_every_strategy_field_and_common_names():
    for name in strategy_names():
        spec = get_strategy(name)
        names = config_field_names(spec)
        assert set(spec.config_model.model_fields) <= set(names)
    assert "chunk_token_size" in config_field_names(get_strategy("sentence"))


def test_the_entry_points_refuse_what_they_cannot_chunk_truly():
    """Found by a reading of README "Using the library without Dagster" (session 30): each of these
    used to return wrong chunks without a word, or fail later with an error naming an internal model."""
    from chunking import ParsedDocument, Page, chunk_document
    from chunking.errors import InvalidDocumentError, UnknownStrategyError

    # A string for a tokenizer has an ``encode`` of its own: every count came back 0, no cap held.
    with pytest.raises(TypeError, match=r"tokenizer: expected a Tokenizer \(encode and decode\).*got str"):
        chunk_text(PROSE, tokenizer="cl100k_base")
    with pytest.raises(TypeError, match=r"text must be str, got bytes \(decode it first"):
        chunk_text(PROSE.encode())
    with pytest.raises(TypeError, match="text must be str, got NoneType"):
        chunk_text(None)
    # A typo in the strategy: a ValueError like every other bad argument, still a KeyError as before.
    with pytest.raises(ValueError, match="unknown chunking strategy 'recursve'; known: recursive, "):
        chunk_text(PROSE, "recursve")
    assert issubclass(UnknownStrategyError, KeyError)
    # Pages that are not the text, out of order: chunked with wrong pages before.
    text = "hello world. " * 100
    scrambled = ParsedDocument(doc_id="x", text=text, pages=[Page(page_num=5, char_offset=600, text="x"),
                                                              Page(page_num=2, char_offset=0, text="y")])
    with pytest.raises(InvalidDocumentError, match="document 'x' cannot be chunked: pages do not concatenate to "
                                                   "the text; page 5 starts at 600, expected 0"):
        chunk_document(scrambled, "recursive")
    # A block past the end of the text: paragraph made a chunk ending past it.
    from chunking import Block

    paged = ParsedDocument.from_text(text)
    beyond = paged.model_copy(update={"blocks": [Block(index=0, content="zzz", char_start=0, char_end=999_999)]})
    with pytest.raises(InvalidDocumentError, match="block 0 span 0:999999 is out of order or range"):
        chunk_document(beyond, "paragraph")
    # A lone surrogate: chunked, then every chunk's own hash failed (the pipeline hashes each one).
    with pytest.raises(InvalidDocumentError, match="lone surrogate at character 3"):
        chunk_text("abc\udcff def")
    assert chunk_document(paged, "recursive", tokenizer=CHAR, chunk_token_size=100)  # a sound one is chunked
    # It crosses process boundaries intact (a worker process sends it to its parent).
    import pickle

    import chunking

    again = pickle.loads(pickle.dumps(InvalidDocumentError("d", ["a", "b"])))
    assert (again.doc_id, again.problems, str(again)) == ("d", ["a", "b"], "document 'd' cannot be chunked: a; b")
    assert chunking.InvalidDocumentError is InvalidDocumentError and chunking.UnknownStrategyError is UnknownStrategyError


def test_a_size_derives_the_same_defaults_whatever_its_type():
    """A numpy integer (a size computed with numpy), "200" or 200.0 is the int the field takes: the
    default overlap derived from it is the same. np.int64(200) kept the default 100, and "50" / 50.0
    were refused for an overlap (100) the caller never set."""
    recursive, window = get_strategy("recursive"), get_strategy("sentence_window")
    for size in (200, np.int64(200), np.int32(200), "200", 200.0):
        assert recursive.parse_config({"chunk_token_size": size}).chunk_overlap_token_size == 50, repr(size)
        assert window.parse_config({"chunk_size": size}).overlap == 200 * 128 // 512, repr(size)
    assert recursive.parse_config({"chunk_token_size": "50"}).chunk_overlap_token_size == 12
    with pytest.raises(ValueError, match=r"chunk_overlap_token_size \(60\) must be smaller"):
        recursive.parse_config({"chunk_token_size": np.int64(50), "chunk_overlap_token_size": 60})


def test_the_adr_presets_sizes_follow_the_token_unit_the_common_names_choose():
    """adr counts characters (3,000 target, 500..5,000). The common names switch it to tokens; the sizes
    left to the preset are then in tokens too: scaled by the caller's size, else at 4 characters a
    token. Before, chunk_overlap_token_size=50 made chunks of up to 5,000 *tokens*."""
    window = get_strategy("sentence_window")
    overlap_only = window.parse_config({"preset": "adr", "chunk_overlap_token_size": 50})
    assert (overlap_only.unit, overlap_only.chunk_size, overlap_only.min_size, overlap_only.max_size,
            overlap_only.overlap) == ("tokens", 750, 125, 1250, 50)
    sized = window.parse_config({"preset": "adr", "chunk_token_size": 300})
    assert (sized.chunk_size, sized.max_size, sized.min_size) == (300, 300, 50)  # min: 500 of 3,000, scaled
    # In the preset's own unit nothing moves.
    assert window.parse_config({"preset": "adr", "chunk_size": 1000}).min_size == 500
    text = " ".join(f"Sentence {i} of the decision record says one more thing about it." for i in range(600))
    chunks = chunk_text(text, "sentence_window", preset="adr", chunk_overlap_token_size=50)
    assert max(c.token_count for c in chunks) <= 1250 and len(chunks) > 3


def test_settings_that_would_be_ignored_or_cut_words_are_refused():
    """Each was accepted, changed the config hash, and changed nothing (or cut every word)."""
    semantic, token = get_strategy("semantic"), get_strategy("token")
    for ignored in ({"breakpoint_threshold_type": "gradient"}, {"breakpoint_threshold_amount": 90.0}):
        with pytest.raises(ValueError, match="number_of_chunks derives the threshold .* give number_of_chunks or"):
            semantic.parse_config({"number_of_chunks": 5, **ignored})
    assert semantic.parse_config({"number_of_chunks": 5}).number_of_chunks == 5
    for everywhere in ("", "x*", r"\s*", "(?<=.)"):
        with pytest.raises(ValueError, match="matches the empty string between two letters or digits"):
            semantic.parse_config({"sentence_split_regex": everywhere})
    # The default type is what a config's own dump names: accepted, and the dump loads again.
    counted = semantic.parse_config({"number_of_chunks": 5, "breakpoint_threshold_type": "percentile"})
    assert semantic.parse_config(counted.model_dump(mode="json")) == counted
    # The reference's own pattern matches nothing after "。": a cut there, accepted.
    assert semantic.parse_config({"sentence_split_regex": r"(?<=[.?!])\s+|(?<=[。？！])"})
    with pytest.raises(ValueError, match="split_by_character_only needs split_by_character"):
        token.parse_config({"split_by_character_only": True})
    assert token.parse_config({"split_by_character_only": True, "split_by_character": "\n\n"})


def test_paragraph_on_plain_text_notes_its_fallback_without_a_warning(caplog):
    import logging

    from chunking import Block, ParsedDocument, chunk_document

    with caplog.at_level(logging.INFO, logger="chunking"):
        chunks = chunk_text(PROSE, "paragraph", tokenizer=CHAR, chunk_token_size=200)
    assert chunks and all(c.metadata.get("fallback") == "recursive" for c in chunks)
    [record] = [r for r in caplog.records if "no blocks sidecar content" in r.getMessage()]
    assert record.levelno == logging.INFO  # plain text has no blocks by nature
    caplog.clear()
    empty_blocks = ParsedDocument.from_text(PROSE).model_copy(update={"blocks": [Block(index=0, content=" ")]})
    with caplog.at_level(logging.INFO, logger="chunking"):
        chunk_document(empty_blocks, "paragraph", tokenizer=CHAR, chunk_token_size=200)
    assert [r.levelno for r in caplog.records if "no blocks sidecar content" in r.getMessage()] == [logging.WARNING]
