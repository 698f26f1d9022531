"""The embeddings step's model calls (assets/embed_groups.py): grouped for throughput, refused per document."""

from contextlib import nullcontext

import numpy as np
import pytest

from assets.embed_groups import GROUP_TEXTS, embed_in_groups
from chunking.limits import LimitExceeded


class Model:
    """Records its calls; a call holding a SLOW text runs out of its budget."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, rows: list[str]) -> np.ndarray:
        self.calls.append(list(rows))
        if any("SLOW" in r for r in rows):
            raise LimitExceeded("call", "embed_timeout_s", "embedding time", None, "300 s")
        return np.array([[float(len(r)), 1.0] for r in rows], dtype=np.float32)


def run(needs, known=(), model=None):
    model = model or Model()
    labels = []

    def budget(label):
        labels.append(label)
        return nullcontext()

    vectors, seconds, refused = embed_in_groups(needs, set(known), model, budget, lambda row: row)
    return model, labels, vectors, seconds, refused


def needs_of(**docs):
    return {doc.replace("_", "."): {text: text for text in texts} for doc, texts in docs.items()}


def test_small_documents_share_a_call_and_a_large_one_gets_its_own():
    big = [f"big text {i}" for i in range(GROUP_TEXTS)]
    needs = needs_of(a_txt=["one", "two"], b_txt=["two", "three"], big_txt=big, c_txt=["four"])
    model, labels, vectors, seconds, refused = run(needs, known={"three"})
    assert refused == {}
    # "two" is a.txt's, embedded once; "three" was cached; big.txt alone; a, b and c share the rest.
    assert model.calls == [big, ["one", "two", "four"]]
    assert labels == ["big.txt", "documents a.txt, b.txt, c.txt"]
    assert set(vectors) == {"one", "two", "four", *big}
    assert set(seconds) == {"a.txt", "b.txt", "big.txt", "c.txt"}
    assert seconds["b.txt"] == 0.0  # it asked the model for nothing


def test_a_group_over_its_budget_is_retried_document_by_document_and_only_the_slow_one_is_refused():
    needs = needs_of(a_txt=["one", "SLOW shared"], b_txt=["two"], c_txt=["SLOW shared", "three"])
    model, labels, vectors, seconds, refused = run(needs)
    assert set(refused) == {"a.txt", "c.txt"}  # each over its own budget, alone
    assert "embed_timeout_s" in refused["a.txt"]
    assert model.calls[0] == ["one", "SLOW shared", "two", "three"]  # the group's call, refused
    assert ["two"] in model.calls and ["three"] in model.calls[1:]
    assert set(vectors) == {"two", "three"} and "b.txt" in seconds
    assert labels[0] == "documents a.txt, b.txt, c.txt" and labels[1:4] == ["a.txt", "b.txt", "c.txt"]


def test_a_text_claimed_by_a_refused_document_is_embedded_for_the_next_one_that_needs_it():
    slow = ["SLOW"] + [f"a{i}" for i in range(GROUP_TEXTS)]  # alone: over GROUP_TEXTS texts
    needs = {"a.txt": {**{t: t for t in slow}, "shared": "shared"}, "b.txt": {"shared": "shared"}}
    model, labels, vectors, seconds, refused = run(needs)
    assert set(refused) == {"a.txt"}
    assert "shared" in vectors and ["shared"] in model.calls  # b.txt's own call for it
    assert "b.txt" in seconds


@pytest.mark.parametrize("count", [0, 1, GROUP_TEXTS - 1])
def test_every_document_not_refused_has_a_vector_for_each_of_its_texts(count):
    needs = {f"d{i}.txt": {f"t{i}-{j}": f"t{i}-{j}" for j in range(count)} for i in range(5)}
    _, _, vectors, seconds, refused = run(needs)
    assert refused == {} and set(seconds) == set(needs)
    assert all(key in vectors for rows in needs.values() for key in rows)
    assert all(vectors[k][0] == len(k) for k in vectors)  # each key's own vector


def test_plan_calls_puts_every_document_in_one_call_large_ones_alone():
    from assets.embed_groups import plan_calls

    sizes = {"a": 10, "big": GROUP_TEXTS, "b": GROUP_TEXTS - 10, "c": 1, "d": 0}
    assert plan_calls(sizes) == [["big"], ["a", "b"], ["c", "d"]]
    assert plan_calls({}) == []


def test_time_spent_on_a_refused_document_is_charged_to_it_not_to_the_others(monkeypatch):
    import assets.embed_groups as embed_groups

    class Clock:
        now = 0.0

        def perf_counter(self):
            return self.now

    clock = Clock()
    monkeypatch.setattr(embed_groups, "time", clock)

    class SlowModel(Model):
        def __call__(self, rows):
            clock.now += 100.0 if any("SLOW" in r for r in rows) else 1.0
            return super().__call__(rows)

    needs = needs_of(a_txt=["one"], slow_txt=["SLOW"], b_txt=["two"])
    _, _, _, seconds, refused = run(needs, model=SlowModel())
    assert set(refused) == {"slow.txt"}
    # The group's call (100 s, refused) and its own retry (100 s) are slow.txt's; a and b took 1 s each.
    assert seconds == {"slow.txt": 200.0, "a.txt": 1.0, "b.txt": 1.0}
