"""``bench/bench_strategies.py``'s wall-clock table: each chunker over the encodes that bracket it.

A fake clock stands in for the machine: every call of the encode or of a chunker
advances it by a scripted amount, so the ratios the bench computes can be checked
exactly, including on a machine whose speed drifts during the round.
"""

import pytest

from tests.conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_strategies")


class ScriptedMachine:
    """A clock and callables that spend scripted seconds: ``encode`` the next of
    ``encodes``, each chunker its own list; CPU time is wall time times ``cpu_share``."""

    def __init__(self, encodes, cpu_share=1.0):
        self.now = 0.0
        self.encodes = list(encodes)
        self.cpu_share = cpu_share
        self.texts = []

    def clock(self):
        return self.now, self.now * self.cpu_share

    def encode(self, text):
        self.texts.append(("encode", text))
        self.now += self.encodes.pop(0)

    def chunker(self, name, seconds, chunks=3):
        seconds = list(seconds)

        def run(text):
            self.texts.append((name, text))
            if not seconds:
                raise AssertionError(f"{name} ran more often than scripted")
            spent = seconds.pop(0)
            if spent is None:
                raise ValueError("a peer's bug")
            self.now += spent
            return chunks

        return run


def test_each_chunker_is_measured_against_the_encodes_before_and_after_it(bench):
    # The machine slows down during the round: encodes of 1.0, 2.0 then 3.0 s. Chunker a
    # (1.5 s) sits between the first two, chunker b (5.0 s) between the last two.
    machine = ScriptedMachine(encodes=[1.0, 2.0, 3.0], cpu_share=0.5)
    chunkers = [bench.Chunker("chunkyard a", machine.chunker("a", [1.5], chunks=7)),
                bench.Chunker("chunkyard b", machine.chunker("b", [5.0], chunks=9))]
    rows = {r.name: r for r in bench.measure(chunkers, "some text", machine.encode, 1, clock=machine.clock)}
    assert rows["chunkyard a"].ratios == [pytest.approx(1.5 / 1.5)]  # mean of 1.0 and 2.0
    assert rows["chunkyard b"].ratios == [pytest.approx(5.0 / 2.5)]  # mean of 2.0 and 3.0
    assert rows["chunkyard a"].cpu_ratios == [pytest.approx(1.0)]
    assert rows["chunkyard b"].wall == [pytest.approx(5.0)] and rows["chunkyard b"].cpu == [pytest.approx(2.5)]
    assert (rows["chunkyard a"].chunks, rows["chunkyard b"].chunks) == (7, 9)
    # One encode per chunker plus the first: encode, a, encode, b, encode.
    assert [who for who, _ in machine.texts] == ["encode", "a", "encode", "b", "encode"]
    # Every call gets an equal text that is a new object (no encoding reused by identity).
    texts = [text for _, text in machine.texts]
    assert all(text == "some text" for text in texts)
    assert len({id(text) for text in texts}) == len(texts)


def test_a_failing_chunker_is_reported_and_the_others_keep_their_own_brackets(bench):
    # Round 1: encode 1, a fails, b 4 (bracketed by encodes 1 and 3), encode 3.
    # Round 2: a skipped from then on; encode 2, b 6, encode 2.
    machine = ScriptedMachine(encodes=[1.0, 3.0, 2.0, 2.0])
    chunkers = [bench.Chunker("peer a", machine.chunker("a", [None])),
                bench.Chunker("chunkyard b", machine.chunker("b", [4.0, 6.0]))]
    rows = {r.name: r for r in bench.measure(chunkers, "text", machine.encode, 2, clock=machine.clock)}
    assert rows["peer a"].error == "ValueError: a peer's bug" and rows["peer a"].ratios == []
    assert rows["chunkyard b"].ratios == [pytest.approx(4.0 / 2.0), pytest.approx(6.0 / 2.0)]
    assert "| peer a | failed: ValueError: a peer's bug |" in bench.table(list(rows.values()))
    assert not machine.encodes  # every scripted encode was used: none skipped, none extra


@pytest.mark.parametrize("warm", [False, True])
def test_a_chunkers_memo_of_counts_is_emptied_before_each_timed_run_outside_the_clock(bench, warm):
    # Every repetition chunks the same text: a memo kept from the one before would answer it.
    machine = ScriptedMachine(encodes=[1.0] * 4)  # each round opens with an encode
    resets = []

    def reset():
        machine.texts.append(("reset", None))
        resets.append(machine.now)
        machine.now += 100.0  # were it timed, the ratio would show it

    chunkers = [bench.Chunker("chunkyard a", machine.chunker("a", [2.0, 2.0]), reset)]
    rows = bench.measure(chunkers, "text", machine.encode, 2, clock=machine.clock, warm=warm)
    if warm:
        assert resets == [] and [who for who, _ in machine.texts] == ["encode", "a", "encode"] * 2
    else:
        assert [who for who, _ in machine.texts] == ["encode", "reset", "a", "encode"] * 2
    assert rows[0].ratios == [pytest.approx(2.0), pytest.approx(2.0)]


def test_every_timed_call_starts_after_a_garbage_collection_outside_the_clock(bench):
    # A collection set off by garbage others left would be charged to whoever runs next:
    # one is made before every timed call, encodes included, and never timed.
    machine = ScriptedMachine(encodes=[1.0] * 3)

    def collect():
        machine.texts.append(("collect", None))
        machine.now += 100.0  # were it timed, the ratios would show it

    chunkers = [bench.Chunker("chunkyard a", machine.chunker("a", [2.0]), lambda: machine.texts.append(("reset", None))),
                bench.Chunker("chunkyard b", machine.chunker("b", [3.0]))]
    rows = bench.measure(chunkers, "text", machine.encode, 1, clock=machine.clock, collect=collect)
    assert [who for who, _ in machine.texts] == ["collect", "encode", "reset", "collect", "a", "collect", "encode",
                                                  "collect", "b", "collect", "encode"]
    assert [r.ratios for r in rows] == [[pytest.approx(2.0)], [pytest.approx(3.0)]]


def test_the_bench_forgets_our_tokenizers_counts_as_a_new_process_has_them(bench):
    from chunking import default_tokenizer

    tokenizer = default_tokenizer()
    chunker = next(c for c in bench.own_chunkers(tokenizer) if c.name == "chunkyard recursive")
    chunker.run("Some words here. And more of them, on a line.\n\n" * 300)
    assert tokenizer.small_counts() and (tokenizer.short_key_counts() >= 0).any()
    chunker.reset()
    assert not tokenizer.small_counts() and (tokenizer.short_key_counts() == -1).all()


@pytest.mark.parametrize(
    ("n", "ranks"),
    [
        (5, (1, 5)),  # too few values for 95%: the whole range
        (8, (1, 8)),
        (9, (2, 8)),  # P(Binomial(9, 1/2) <= 1) = 10/512 <= 2.5% < P(<= 2) = 46/512
        (25, (8, 18)),
    ],
)
def test_the_median_interval_takes_the_order_statistics_of_the_binomial_rule(bench, n, ranks):
    values = [float(v) for v in range(n, 0, -1)]  # unsorted on purpose: n, n-1, ..., 1
    assert bench.median_interval(values) == (float(ranks[0]), float(ranks[1]))
