"""The ``semantic`` strategy with mocked embeddings (seeds/semantic-chunking.md §7).

The mock embeds a text as the counts of its topic words, so a window's vector is
a mixture of the topics it contains and planted topic shifts are known exactly.
"""

from __future__ import annotations

import itertools
import logging
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from chunking.model import Page, ParsedDocument
from chunking.strategies.recursive import split_recursive
from chunking.strategies.semantic import (
    BREAKPOINT_DEFAULTS,
    SPEC,
    SemanticConfig,
    UnitSizes,
    adjacent_distances,
    breakpoint_threshold,
    chunk_semantic,
    combined_vectors,
    find_breakpoints,
    fit_groups_to_cap,
    gap_distances,
    merge_small_groups,
    sentence_units,
    split_semantic,
    table_regions,
    threshold_for_chunk_count,
    window_ranges,
)
from chunking.tokenizers import CharTokenizer, TiktokenTokenizer

CHAR = CharTokenizer()
TOPICS = ("cat", "stock", "rain", "code")


class TopicEmbed:
    """Counts of each topic word (plus a small shared component); records every call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rows = []
        for text in texts:
            words = re.findall(r"[a-z]+", text.lower())
            rows.append([0.05] + [sum(w.startswith(t) for w in words) for t in TOPICS])
        return np.array(rows, dtype=np.float32)


CATS = ["The cat sleeps.", "A cat purrs loudly.", "My cat hunts mice.", "Every cat likes naps.", "The cat is fed."]
STOCKS = [
    "The stock rose.", "A stock fell today.", "Each stock moved.", "The stock index closed.", "Stock traders cheered."
]  # fmt: skip
RAIN = ["The rain began.", "Heavy rain fell.", "Rain soaked the town.", "The rain stopped late.", "More rain is due."]


def spans_text(spans):
    return [s.text for s in spans]


# --- planted topic shifts -----------------------------------------------------


PLANTED = [
    (mode, size, shape)
    for mode in ("reembed", "combine")
    for size in (0, 1, 2)
    for shape in ("gap", "centered")
    # Ragged sentence lengths tip wide centred combined windows one gap over
    # (token weighting, as mean pooling does): the even-sentence test covers it.
    if (mode, size, shape) != ("combine", 2, "centered")
    # With no buffer both shapes are the sentence itself (test_window_ranges): one case.
    and (size, shape) != (0, "centered")
]


@pytest.mark.parametrize(("window_mode", "buffer_size", "window_shape"), PLANTED)
def test_split_lands_exactly_on_the_planted_topic_shift(window_mode, buffer_size, window_shape):
    text = " ".join(CATS + STOCKS)
    spans = split_semantic(
        text, CHAR, TopicEmbed(), buffer_size=buffer_size, window_mode=window_mode, window_shape=window_shape
    )
    assert spans_text(spans) == [" ".join(CATS), " ".join(STOCKS)]


@pytest.mark.parametrize("window_shape", ["gap", "centered"])
@pytest.mark.parametrize("window_mode", ["reembed", "combine"])
def test_wide_windows_find_the_shift_between_even_sentences(window_mode, window_shape):
    # combine weights a sentence by its tokens, as mean pooling over a window's
    # text does; with ragged lengths a wide window can tip the peak one gap over.
    cats = [f"The cat {verb}." for verb in ("naps", "eats", "runs", "hops", "sits", "digs")]
    stocks = [f"The stock {verb}." for verb in ("rose", "fell", "held", "sank", "rang", "shot")]
    spans = split_semantic(
        " ".join(cats + stocks), CHAR, TopicEmbed(), buffer_size=2, window_mode=window_mode, window_shape=window_shape
    )
    assert spans_text(spans) == [" ".join(cats), " ".join(stocks)]


@pytest.mark.parametrize("window_mode", ["reembed", "combine"])
def test_two_planted_shifts_with_number_of_chunks(window_mode):
    text = "\n".join(CATS + STOCKS + RAIN)
    spans = split_semantic(text, CHAR, TopicEmbed(), number_of_chunks=3, window_mode=window_mode)
    assert spans_text(spans) == ["\n".join(CATS), "\n".join(STOCKS), "\n".join(RAIN)]


def test_combine_embeds_each_sentence_once_and_reembed_embeds_each_window_once():
    text = " ".join(CATS[:3] + STOCKS[:3])
    combine, gap, centered = TopicEmbed(), TopicEmbed(), TopicEmbed()
    split_semantic(text, CHAR, combine, window_mode="combine", buffer_size=1)
    split_semantic(text, CHAR, gap, window_mode="reembed", buffer_size=1)
    split_semantic(text, CHAR, centered, window_mode="reembed", window_shape="centered", buffer_size=1)
    s = CATS[:3] + STOCKS[:3]
    assert combine.calls == [s]
    # gap windows: the 2 sentences before each gap and the 2 after it, each distinct window once
    joined = lambda a, b: " ".join(s[a:b])
    assert gap.calls == [[s[0], joined(0, 2), joined(1, 3), joined(2, 4), joined(3, 5), joined(4, 6), s[5]]]
    assert centered.calls == [[joined(0, 2), joined(0, 3), joined(1, 4), joined(2, 5), joined(3, 6), joined(4, 6)]]


def test_window_ranges():
    assert window_ranges(5, 1, "gap") == ([(0, 0), (0, 1), (1, 2), (2, 3)], [(1, 2), (2, 3), (3, 4), (4, 4)])
    assert window_ranges(4, 1, "centered") == ([(0, 1), (0, 2), (1, 3)], [(0, 2), (1, 3), (2, 3)])
    assert window_ranges(3, 0, "gap") == window_ranges(3, 0, "centered") == ([(0, 0), (1, 1)], [(1, 1), (2, 2)])


def test_combined_window_vector_is_the_token_weighted_sum_of_its_sentences():
    vectors = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    combined = combined_vectors(vectors, [(0, 1), (0, 2), (2, 2)], np.array([3.0, 6.0, 2.0]))
    assert np.allclose(combined, [3 * unit[0] + 6 * unit[1], 3 * unit[0] + 6 * unit[1] + 2 * unit[2], 2 * unit[2]])


@pytest.mark.parametrize("window_shape", ["gap", "centered"])
@pytest.mark.parametrize(("window_mode", "buffer_size"), [("combine", 1), ("combine", 2), ("reembed", 1)])
def test_distances_are_computed_in_bounded_blocks_and_agree_with_one_pass(
        monkeypatch, window_mode, buffer_size, window_shape):
    # A long document's distances are worked out a block of gaps at a time, each block
    # embedding only what its windows cover, so working memory does not grow with the
    # document; the blocks must join seamlessly.
    import chunking.strategies.semantic as semantic

    rng = np.random.default_rng(7)
    text = " ".join(f"Sentence {i} is here." for i in range(23))
    units = sentence_units(text)
    table = {text[s:e]: rng.standard_normal(6) for s, e in units}

    def embed(texts):
        return np.array([sum((table[text[s:e]] for s, e in units if text[s:e] in t), np.zeros(6)) for t in texts])

    weights = rng.integers(1, 9, len(units)).astype(np.float64)
    whole = gap_distances(text, units, embed, buffer_size, window_mode, window_shape, weights)
    seen_rows = []
    combine = semantic.combined_vectors
    monkeypatch.setattr(semantic, "combined_vectors",
                        lambda v, windows, w=None: seen_rows.append(len(v)) or combine(v, windows, w))
    monkeypatch.setattr(semantic, "_GAPS_PER_BLOCK", 4)
    calls = []
    blocked = gap_distances(text, units, lambda texts: calls.append(len(texts)) or embed(texts), buffer_size,
                            window_mode, window_shape, weights)
    assert len(blocked) == len(units) - 1
    np.testing.assert_allclose(blocked, whole, rtol=0, atol=1e-12)
    # One embed call per block of 4 gaps, of the units (or windows, two per gap) it covers.
    assert len(calls) == 6
    assert max(calls) <= (4 + 2 * buffer_size + 1 if window_mode == "combine" else 2 * 4)
    if window_mode == "combine":
        # Each block sums only the units its windows cover: the block's gaps and the buffer.
        assert len(seen_rows) == 2 * 6 and max(seen_rows) <= 4 + 2 * buffer_size + 1


def test_a_document_of_many_tiny_sentences_holds_one_block_of_vectors_at_a_time(monkeypatch):
    # 60k distinct sentences of a few characters (a hostile 5M-character document has a
    # million): all their vectors at once would be 60k x 384 float32 = 88 MiB. A block's
    # working memory (float64 copies, prefix sums) is ~18 MiB at 1024 gaps, the units ~27.
    import tracemalloc

    import chunking.strategies.semantic as semantic

    monkeypatch.setattr(semantic, "_GAPS_PER_BLOCK", 1024)
    text = " ".join(f"W{i}." for i in range(60_000))
    dimension = 384

    def embed(texts):
        return np.ones((len(texts), dimension), dtype=np.float32)

    tracemalloc.start()
    try:
        spans = split_semantic(text, CHAR, embed, chunk_token_size=4000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "".join(s.text for s in spans).replace(" ", "") == text.replace(" ", "")
    assert peak < 75 * 2**20, f"peak {peak / 2**20:.0f} MiB"


def test_a_recording_embedder_keeps_copies_of_at_most_limit_vectors():
    from chunking.embedding import RecordingEmbedder

    class Plain:
        model_id, dimension = "plain", 2

        def embed(self, texts):
            return np.arange(2 * len(texts), dtype=np.float32).reshape(-1, 2)

    recording = RecordingEmbedder(Plain(), limit=3)
    vectors = recording.embed(["a", "b", "a", "c", "d"])
    assert vectors.shape == (5, 2)
    kept = recording.vectors_for({"1": "a", "2": "b", "3": "c", "4": "d"})
    assert sorted(kept) == ["1", "2", "3"], "the first three distinct texts only"
    np.testing.assert_array_equal(kept["3"], [6, 7])
    assert all(v.base is None for v in kept.values()), "copies: no row keeps a whole batch alive"


def test_unit_sizes_count_each_sentence_with_the_whitespace_before_it():
    tokenizer = TiktokenTokenizer()
    text = ("Über uns.  Das ist gut. 😀 Emoji here.\n\nNext paragraph with words. " * 400).strip()
    units = sentence_units(text)
    sizes = UnitSizes.measure(text, units, tokenizer)
    starts = [0] + [e for _, e in units[:-1]]
    assert sizes.tokens.tolist() == [tokenizer.count(text[a:e]) for a, (_, e) in zip(starts, units)]
    assert sizes.lead.tolist() == [tokenizer.count(text[a:s]) for a, (s, _) in zip(starts, units)]


@pytest.mark.parametrize("window_mode", ["reembed", "combine"])
def test_gap_windows_peak_at_the_shift_where_centred_windows_can_miss_it(window_mode):
    # A model that reacts to the first foreign sentence in a window more than to
    # the balance (here: any stock word at all flips the vector): centred windows
    # peak one gap early, gap windows do not.
    def saturating(texts):
        return np.array([[1.0, 0.0] if "stock" not in t else [0.2, 1.0] if "cat" in t else [0.0, 1.0] for t in texts])

    text = " ".join(CATS + STOCKS)
    units = sentence_units(text)
    gap = gap_distances(text, units, saturating, 1, window_mode, "gap")
    assert int(np.argmax(gap)) == len(CATS) - 1
    if window_mode == "reembed":
        centred = gap_distances(text, units, saturating, 1, window_mode, "centered")
        assert int(np.argmax(centred)) == len(CATS) - 2


def test_chunks_keep_the_source_text_between_sentences():
    text = "The cat sleeps.\n\nA cat purrs.   My cat hunts.\n\nThe stock rose.\nA stock fell."
    spans = split_semantic(text, CHAR, TopicEmbed(), buffer_size=0)
    assert spans_text(spans) == ["The cat sleeps.\n\nA cat purrs.   My cat hunts.", "The stock rose.\nA stock fell."]
    assert all(text[s.start : s.end] == s.text for s in spans)


# --- threshold maths ----------------------------------------------------------

DISTANCES = np.array([0.1, 0.4, 0.2, 0.9, 0.3, 0.5])


def test_percentile_threshold_and_strictly_greater_breaks():
    threshold, scores = breakpoint_threshold(DISTANCES, "percentile", 50)
    assert threshold == pytest.approx(0.35)  # median of 0.1 0.2 0.3 | 0.4 0.5 0.9
    assert scores is not None and list(scores) == list(DISTANCES)
    assert find_breakpoints(DISTANCES, "percentile", 50) == [1, 3, 5]
    # The 95th percentile interpolates between 0.5 and 0.9: only the largest gap breaks.
    assert breakpoint_threshold(DISTANCES, "percentile")[0] == pytest.approx(0.5 + 0.75 * 0.4)
    assert find_breakpoints(DISTANCES) == [3]
    # 100th percentile is the maximum, and nothing is strictly greater than it.
    assert find_breakpoints(DISTANCES, "percentile", 100) == []


def test_fiftieth_percentile_splits_half_the_time():
    distances = np.random.default_rng(3).random(101)
    assert len(find_breakpoints(distances, "percentile", 50)) == 50


def test_standard_deviation_threshold():
    mean, std = DISTANCES.mean(), DISTANCES.std()
    assert breakpoint_threshold(DISTANCES, "standard_deviation")[0] == pytest.approx(mean + 3 * std)
    assert breakpoint_threshold(DISTANCES, "standard_deviation", 1)[0] == pytest.approx(0.4 + 0.2582, abs=1e-4)
    assert find_breakpoints(DISTANCES, "standard_deviation", 1) == [3]


def test_interquartile_threshold():
    q1, q3 = 0.2 + 0.25 * 0.1, 0.4 + 0.75 * 0.1  # numpy linear interpolation
    assert breakpoint_threshold(DISTANCES, "interquartile")[0] == pytest.approx(0.4 + 1.5 * (q3 - q1))
    assert find_breakpoints(DISTANCES, "interquartile", 0.5) == [3]  # 0.4 + 0.5 * 0.25
    assert find_breakpoints(DISTANCES, "interquartile", 0.3) == [3, 5]  # 0.4 + 0.3 * 0.25


def test_gradient_threshold_uses_the_gradient_as_score():
    threshold, scores = breakpoint_threshold(DISTANCES, "gradient", 50)
    assert np.allclose(scores, [0.3, 0.05, 0.25, 0.05, -0.2, 0.2])  # np.gradient, central differences
    assert threshold == pytest.approx(0.125)
    assert find_breakpoints(DISTANCES, "gradient", 50) == [0, 2, 5]


def test_threshold_from_number_of_chunks_maps_counts_to_percentiles():
    d = np.arange(11, dtype=float)  # 11 gaps
    assert threshold_for_chunk_count(d, 1) == pytest.approx(10.0)  # 100th percentile
    assert threshold_for_chunk_count(d, 11) == pytest.approx(0.0)  # 0th percentile
    assert threshold_for_chunk_count(d, 6) == pytest.approx(5.0)  # halfway
    assert threshold_for_chunk_count(d, 99) == pytest.approx(0.0)  # clamped
    assert find_breakpoints(d, number_of_chunks=6) == [6, 7, 8, 9, 10]


@pytest.mark.parametrize("kind", sorted(BREAKPOINT_DEFAULTS))
def test_amount_none_means_the_per_type_default(kind):
    assert BREAKPOINT_DEFAULTS == {"percentile": 95, "standard_deviation": 3, "interquartile": 1.5, "gradient": 95}
    distances = np.random.default_rng(0).random(40)
    assert find_breakpoints(distances, kind) == find_breakpoints(distances, kind, BREAKPOINT_DEFAULTS[kind])


def test_distances_are_one_minus_cosine_and_zero_vectors_are_far():
    vectors = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 5.0], [0.0, 0.0]])
    assert np.allclose(adjacent_distances(vectors), [0.0, 1.0, 1.0])


# --- min and max --------------------------------------------------------------


def test_small_group_merges_across_the_weaker_boundary():
    tokens = UnitSizes(np.array([10, 10, 2, 5, 10]), np.zeros(5, dtype=int))
    groups = [(0, 1), (2, 2), (3, 4)]
    # gap 1 (before the small group) is weaker than gap 2 (after it): merge left
    assert merge_small_groups(groups, tokens, np.array([0.1, 0.3, 0.8, 0.1]), 5, 100) == [(0, 2), (3, 4)]
    assert merge_small_groups(groups, tokens, np.array([0.1, 0.8, 0.3, 0.1]), 5, 100) == [(0, 1), (2, 4)]
    # the weaker side would exceed the cap: the other side takes it
    assert merge_small_groups(groups, tokens, np.array([0.1, 0.3, 0.8, 0.1]), 5, 21) == [(0, 1), (2, 4)]
    # neither fits: it stays
    assert merge_small_groups(groups, tokens, np.array([0.1, 0.3, 0.8, 0.1]), 5, 16) == groups


def test_min_chunk_size_is_enforced_end_to_end():
    # One odd sentence between two topics would be a chunk of its own.
    text = " ".join(CATS + ["Rain."] + STOCKS)
    spans = split_semantic(text, CHAR, TopicEmbed(), buffer_size=0, breakpoint_threshold_amount=80)
    assert "Rain." in spans_text(spans)
    spans = split_semantic(text, CHAR, TopicEmbed(), buffer_size=0, breakpoint_threshold_amount=80, min_chunk_size=20)
    assert "Rain." not in spans_text(spans)
    assert all(s.tokens >= 20 for s in spans)
    assert "".join(spans_text(spans)).replace(" ", "") == text.replace(" ", "")


def test_the_last_small_group_is_merged_too():
    text = " ".join(CATS + ["A stock."])
    spans = split_semantic(text, CHAR, TopicEmbed(), buffer_size=0, min_chunk_size=10)
    assert spans_text(spans) == [text]


def test_max_is_enforced_at_sentence_boundaries_on_uniform_text():
    # Identical sentences: every distance is 0, no percentile split; the cap splits.
    sentence = "The same sentence again."
    text = " ".join([sentence] * 40)
    embed = TopicEmbed()
    spans = split_semantic(text, CHAR, embed, chunk_token_size=100)
    assert len(embed.calls) == 1
    assert all(s.tokens <= 100 for s in spans)
    assert all(s.text == " ".join([sentence] * (s.text.count(sentence))) for s in spans)
    assert [s.text.count(sentence) for s in spans] == [4] * 10  # 4 * 25 - 1 = 99 chars fit, 5 do not


def test_a_500_word_sentence_is_re_split_by_r_and_its_neighbours_stay_whole(caplog):
    long_sentence = "Whereas " + " ".join(f"word{i}" for i in range(500)) + "."
    text = f"{CATS[0]} {long_sentence} {CATS[1]}"
    with caplog.at_level(logging.WARNING, logger="chunking.strategies.semantic"):
        spans = split_semantic(text, CHAR, TopicEmbed(), chunk_token_size=300)
    assert f"chars {len(CATS[0]) + 1}-{len(CATS[0]) + 1 + len(long_sentence)} exceeds 300 tokens" in caplog.text
    assert all(s.tokens <= 300 for s in spans)
    assert spans[0].text == CATS[0]
    assert spans[-1].text == CATS[1]
    assert "".join(spans_text(spans)).replace(" ", "") == text.replace(" ", "")
    inner = [s for s in spans if "word250" in s.text]
    assert len(inner) == 1 and inner[0].text == text[inner[0].start : inner[0].end]


def test_tables_are_atomic_units():
    table = "<table><tr><td>cat</td><td>stock</td></tr>" + "<tr><td>1. 2. 3.</td></tr>" * 8 + "</table>"
    text = "The cat sleeps. A cat purrs.\n" + table + "\nThe stock rose. A stock fell."
    units = sentence_units(text)
    assert (text.index(table), text.index(table) + len(table)) in units
    for cap in (len(table), len(table) + 40, 1000):
        spans = split_semantic(text, CHAR, TopicEmbed(), chunk_token_size=cap, buffer_size=0)
        assert sum(table in s.text for s in spans) == 1
        assert not any("<table" in s.text and table not in s.text for s in spans)


def test_multi_line_and_inline_tables_are_atomic_too():
    table = "<table>\n<tr><td>The stock. The cat.</td></tr>\n\n<tr><td>x</td></tr>\n</table>"
    text = f"The cat sleeps. See {table} for more. The stock rose. <table id='t'/> A stock fell."
    units = [text[s:e] for s, e in sentence_units(text)]
    assert table in units and "<table id='t'/>" in units
    assert [text[s:e] for s, e in table_regions("<table>unclosed. <table>a</table>")] == []
    for cap in (len(table), 120, 1000):
        spans = split_semantic(text, CHAR, TopicEmbed(), chunk_token_size=cap, buffer_size=0)
        assert sum(table in s.text for s in spans) == 1


def test_a_table_above_the_cap_is_cut_by_r_only_then_and_marked():
    table = "<table>" + "<tr><td>cell</td></tr>" * 30 + "</table>"
    text = "Intro.\n" + table + "\nOutro."
    spans = split_semantic(text, CHAR, TopicEmbed(), chunk_token_size=200)
    assert all(s.tokens <= 200 for s in spans)
    assert spans[0].text == "Intro." and spans[-1].text == "Outro."
    chunks = chunk_semantic(ParsedDocument.from_text(text), SemanticConfig(chunk_token_size=200), CHAR, _embedder())
    assert [bool(c.metadata.get("table_fragment")) for c in chunks] == [False] + [True] * (len(chunks) - 2) + [False]
    whole = chunk_semantic(ParsedDocument.from_text(text), SemanticConfig(chunk_token_size=1000), CHAR, _embedder())
    assert not any(c.metadata.get("table_fragment") for c in whole)
    assert SPEC.atomic_markup == ("table",)


# --- degenerate input ---------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   \n\n  "])
def test_empty_text_gives_nothing_and_embeds_nothing(text):
    embed = TopicEmbed()
    assert split_semantic(text, CHAR, embed) == []
    assert embed.calls == []


def test_one_sentence_is_one_chunk_without_a_model_call():
    embed = TopicEmbed()
    spans = split_semantic("  Only one sentence here.  ", CHAR, embed)
    assert spans_text(spans) == ["Only one sentence here."] and spans[0].start == 2
    assert embed.calls == []


@pytest.mark.parametrize("kind", sorted(BREAKPOINT_DEFAULTS))
def test_identical_repeated_sentences_do_not_split_below_the_cap(kind):
    text = " ".join(["Same words here."] * 12)  # 203 characters, under the cap of 1000
    spans = split_semantic(text, CHAR, TopicEmbed(), breakpoint_threshold_type=kind, chunk_token_size=1000)
    assert spans_text(spans) == [text]


def test_gradient_on_two_sentences_does_not_split():
    text = "The cat sleeps. The stock rose."
    assert spans_text(split_semantic(text, CHAR, TopicEmbed(), breakpoint_threshold_type="gradient")) == [text]


def test_erratic_text_with_min_chunk_size_keeps_sizes_in_bounds():
    rng = np.random.default_rng(7)
    text = " ".join(f"Log line {i} value {rng.integers(1000)}." for i in range(200))
    noise = lambda texts: rng.normal(size=(len(texts), 16))
    spans = split_semantic(text, CHAR, noise, chunk_token_size=400, min_chunk_size=120, breakpoint_threshold_amount=70)
    assert len(spans) > 3
    assert all(s.tokens <= 400 for s in spans)
    # A chunk stays below the minimum only when merging it either way would break the cap.
    for i, s in enumerate(spans):
        if s.tokens < 120:
            neighbours = [spans[j] for j in (i - 1, i + 1) if 0 <= j < len(spans)]
            assert all(len(text[min(s.start, n.start) : max(s.end, n.end)]) > 400 for n in neighbours)
    assert "".join(spans_text(spans)).replace(" ", "") == text.replace(" ", "")


def test_no_embedding_function_falls_back_to_r_with_a_warning(caplog):
    text = "\n\n".join(CATS + STOCKS)
    with caplog.at_level(logging.WARNING, logger="chunking.strategies.semantic"):
        spans = split_semantic(text, CHAR, None, chunk_token_size=60, chunk_overlap_token_size=10)
    assert spans == split_recursive(text, CHAR, 60, 10)
    assert "fallback to recursive_character" in caplog.text


def test_bad_embeddings_raise_clear_errors():
    text = "The cat sleeps. The stock rose. The rain fell."
    with pytest.raises(ValueError, match=r"shape \(2, 3\) for 3 texts"):
        split_semantic(text, CHAR, lambda ts: np.zeros((2, 3)), buffer_size=0)
    with pytest.raises(ValueError, match="non-finite"):
        split_semantic(text, CHAR, lambda ts: np.full((len(ts), 3), np.nan), buffer_size=0)


def test_reference_sentence_regex():
    text = "First one. Second one! Third?  Fourth"
    units = sentence_units(text, r"(?<=[.?!])\s+")
    assert [text[s:e] for s, e in units] == ["First one.", "Second one!", "Third?", "Fourth"]
    other = "Dr. Smith came. He left."
    assert [other[s:e] for s, e in sentence_units(other)] == ["Dr. Smith came.", "He left."]


# --- invariants ---------------------------------------------------------------

WORDS = st.sampled_from(["cat", "stock", "rain", "code", "the", "a", "x", "<table>t</table>", "\n", "\n\n", "."])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    words=st.lists(WORDS, max_size=120),
    cap=st.integers(8, 80),
    buffer_size=st.integers(0, 2),
    mode=st.sampled_from(["reembed", "combine"]),
    shape=st.sampled_from(["gap", "centered"]),
    kind=st.sampled_from(sorted(BREAKPOINT_DEFAULTS)),
    min_size=st.one_of(st.none(), st.integers(1, 8)),
)
def test_no_sentence_lost_or_duplicated(words, cap, buffer_size, mode, shape, kind, min_size):
    text = " ".join(words)
    spans = split_semantic(
        text, CHAR, TopicEmbed(), chunk_token_size=cap, buffer_size=buffer_size, window_mode=mode, window_shape=shape,
        breakpoint_threshold_type=kind, min_chunk_size=min_size,
    )  # fmt: skip
    assert all(text[s.start : s.end] == s.text and s.text == s.text.strip() and s.tokens <= cap for s in spans)
    assert all(a.end <= b.start for a, b in itertools.pairwise(spans))
    gaps = [text[: spans[0].start] if spans else text] + [text[a.end : b.start] for a, b in itertools.pairwise(spans)]
    gaps.append(text[spans[-1].end :] if spans else "")
    assert all(not g.strip() for g in gaps)


def test_a_unit_of_zero_estimated_tokens_between_oversize_units_is_kept():
    # " 。" is one token, as its leading space alone is, so the unit "。" adds 0 to a group's
    # estimate: the cut of an oversize group must not take that for "nothing accumulated yet".
    sizes = UnitSizes(np.array([20, 1, 10]), np.array([0, 1, 0]))
    assert fit_groups_to_cap([(0, 2)], sizes, 8) == [(0, 0), (1, 1), (2, 2)]
    tokenizer = TiktokenTokenizer()
    text = "The first sentence is longer than eight tokens. 。 The last sentence is longer than eight tokens too."
    same = lambda texts: np.ones((len(texts), 3), dtype=np.float32)  # no breakpoint: one group
    spans = split_semantic(text, tokenizer, same, chunk_token_size=8)
    assert "。" in spans_text(spans)
    assert all(text[s.start : s.end] == s.text and s.tokens <= 8 for s in spans)


def test_tiktoken_counts_are_exact():
    tokenizer = TiktokenTokenizer()
    text = "\n\n".join(CATS + STOCKS + RAIN)
    spans = split_semantic(text, tokenizer, TopicEmbed(), chunk_token_size=30)
    assert len(spans) >= 3  # three topics, each over the cap joined: never vacuous
    assert all(s.tokens == len(tokenizer.encode(s.text)) <= 30 for s in spans)


# --- config and strategy ------------------------------------------------------


def test_config_defaults_and_validation():
    config = SemanticConfig()
    assert (config.chunk_token_size, config.token_cap, config.buffer_size) == (200, 200, 1)
    assert config.breakpoint_threshold_type == "percentile" and config.breakpoint_threshold_amount is None
    assert (config.window_mode, config.window_shape, config.chunk_overlap_token_size) == ("combine", "gap", 0)
    with pytest.raises(ValidationError, match="percentile in"):
        SemanticConfig(breakpoint_threshold_amount=150)
    with pytest.raises(ValidationError, match="not a valid regular expression"):
        SemanticConfig(sentence_split_regex="(")
    with pytest.raises(ValidationError, match="must not exceed chunk_token_size"):
        SemanticConfig(chunk_token_size=100, min_chunk_size=200)
    with pytest.raises(ValidationError):
        SemanticConfig(breakpoint_threshold_type="median")
    with pytest.raises(ValidationError):
        SemanticConfig(unknown=1)
    config = SemanticConfig(breakpoint_threshold_type="standard_deviation", breakpoint_threshold_amount=150)
    assert (config.breakpoint_threshold_type, config.breakpoint_threshold_amount) == ("standard_deviation", 150)


def _embedder():
    class Embedder:
        model_id, dimension = "topics", 5
        embed = staticmethod(TopicEmbed())

    return Embedder()


def test_strategy_chunks_a_document_with_provenance():

    first, second = " ".join(CATS) + "\n\n", " ".join(STOCKS)
    doc = ParsedDocument(
        doc_id="d", text=first + second,
        pages=[Page(page_num=0, char_offset=0, text=first), Page(page_num=1, char_offset=len(first), text=second)],
    )  # fmt: skip
    assert SPEC.name == "semantic" and SPEC.needs_embedder and SPEC.config_model is SemanticConfig
    chunks = SPEC.chunk(doc, SemanticConfig(), CHAR, _embedder())
    assert [c.text for c in chunks] == [" ".join(CATS), " ".join(STOCKS)]
    assert [(c.page_start, c.page_end) for c in chunks] == [(0, 0), (1, 1)]
    assert all(doc.text[c.char_start : c.char_end] == c.text and c.token_count == len(c.text) for c in chunks)


def test_strategy_without_embedder_falls_back_and_says_so():
    doc = ParsedDocument.from_text("\n\n".join(CATS))
    chunks = chunk_semantic(
        doc, SemanticConfig(chunk_token_size=40, chunk_overlap_token_size=5, allow_recursive_fallback=True), CHAR, None
    )
    assert [c.text for c in chunks] == [s.text for s in split_recursive(doc.text, CHAR, 40, 5)]
    assert all(c.metadata["fallback"].startswith("recursive_character") for c in chunks)


def test_text_a_sentence_regex_matches_stays_in_the_unit_before_it():
    # The units were the text between matches, so what the regex matched was in no unit and
    # no chunk: with "x", "axb" lost its "x" (found by fuzzing), against "together cover every
    # non-whitespace character". The match now ends the unit before it; a match of only
    # whitespace (the reference regex) or of nothing is trimmed away as before.
    assert sentence_units("axb", "x") == [(0, 2), (2, 3)]
    assert sentence_units("One. Two!  Three", r"(?<=[.?!])\s+") == [(0, 4), (5, 9), (11, 16)]
    assert sentence_units("Stop here; go on", "; ") == [(0, 10), (11, 16)]
    text = "alpha x beta x gamma"
    spans = split_semantic(text, CHAR, TopicEmbed(), chunk_token_size=6, sentence_split_regex="x")
    assert "".join(s.text for s in spans).replace(" ", "") == text.replace(" ", "")


def test_the_strategy_names_its_document_in_its_warnings(caplog):
    # A folder's log interleaves documents: each warning says whose text it is about.
    table = "<table>" + "<tr><td>cell</td></tr>" * 30 + "</table>"
    doc = ParsedDocument.from_text("Intro.\n" + table + "\nOutro.", doc_id="reports/q3.md")
    with caplog.at_level(logging.WARNING, logger="chunking.strategies.semantic"):
        chunk_semantic(doc, SemanticConfig(chunk_token_size=200), CHAR, _embedder())
        chunk_semantic(doc, SemanticConfig(chunk_token_size=200, allow_recursive_fallback=True), CHAR, None)
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("semantic: document 'reports/q3.md': the sentence or table at chars 7-") for m in messages)
    assert any(m.startswith("semantic: document 'reports/q3.md': no embedding function") for m in messages)
