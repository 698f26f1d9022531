"""bench/bench_embedding_scaling.py: the workload it builds, the embed calls it makes of it, the
table's ratios, and (one model-loading test) that its children start their timed embeds together."""

import json

import pytest

from tests.conftest import load_bench

bench = load_bench("bench_embedding_scaling")

DOCUMENTS = [
    {"recursive": ["r0a", "r0b"], "token": ["t0"]},
    {"recursive": ["r1"], "token": []},
    {"recursive": ["r2"], "token": ["t2a", "t2b"]},
]


def test_step_calls_are_one_per_strategy_per_range_run():
    # documents 0-1 are one range run, document 2 the next: as the embeddings steps batch them
    assert bench.calls(DOCUMENTS, "step", per_run=2) == [["r0a", "r0b", "r1"], ["t0"], ["r2"], ["t2a", "t2b"]]
    assert bench.calls(DOCUMENTS, "step", per_run=25) == [["r0a", "r0b", "r1", "r2"], ["t0", "t2a", "t2b"]]


def test_set_and_one_calls():
    assert bench.calls(DOCUMENTS, "set", per_run=25) == [["r0a", "r0b"], ["t0"], ["r1"], ["r2"], ["t2a", "t2b"]]
    assert bench.calls(DOCUMENTS, "one", per_run=25) == [["r0a", "r0b", "t0", "r1", "r2", "t2a", "t2b"]]


def test_chunk_texts_cover_every_strategy_but_semantic_for_every_copy(tmp_path):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    (corpus / "a.md").write_text("# Alpha\n\nFirst paragraph ends here.\n\nSecond one too.\n", encoding="utf-8")
    (corpus / "b.txt").write_text("Plain text, one paragraph that ends in words\n", encoding="utf-8")
    from orchestration.settings import load_settings

    strategies = [i.name for i in load_settings(bench.ROOT / "chunkyard.toml").strategy_instances()]
    assert "semantic" in strategies  # the bench leaves it out, so there is something to leave out

    documents = bench.chunk_texts(corpus, 2, tmp_path / "copies")

    assert len(documents) == 4  # 2 copies x 2 documents
    assert all(list(d) == [s for s in strategies if s != "semantic"] for d in documents)
    assert all(texts for d in documents for texts in d.values())
    texts = [t for d in documents for ts in d.values() for t in ts]
    # bench_scale's distinct copies: the cache could not serve one copy's chunks from the other
    assert any("(copy 0)" in t for t in texts) and any("(copy 1)" in t for t in texts)


def _sample(wall, process_wall, rates):
    return bench.Sample(embed_wall=wall, embed_cpu=wall, process_wall=process_wall, child_rates=rates)


def test_table_ratios_are_to_the_best_one_process_row():
    rows = [bench.Row(label, processes, threads) for label, processes, threads in bench.CONFIGURATIONS]
    rows[0].samples = [_sample(3.0, 14.0, [100 / 3.0]), _sample(3.2, 15.0, [100 / 3.2])]  # median 3.1
    rows[1].samples = [_sample(5.0, 16.0, [20.0]), _sample(5.0, 16.0, [20.0])]
    rows[2].samples = [_sample(2.79, 13.0, [18.0, 19.0]), _sample(2.79, 13.0, [19.0, 20.0])]

    lines = bench.table(rows, 100).splitlines()

    two = [cell.strip() for cell in lines[4].split("|")[1:-1]]
    assert two[0] == "2 processes, 1 thread each"
    assert two[5] == "0.90"  # 2.79 / 3.1: the embed-only ratio to the faster 1-process row
    assert two[7] == "0.90"  # 13.0 / 14.5, process walls
    assert two[8] == "0.95"  # median child rate 19.0 / the 1-thread process's 20.0
    one_thread = [cell.strip() for cell in lines[3].split("|")[1:-1]]
    assert one_thread[5] == f"{5.0 / 3.1:.2f}"


@pytest.mark.model
def test_children_wait_for_go_and_embed_their_share(tmp_path):
    shares = [[["A sentence about chunking.", "Another one."], ["Third text here."]], [["Fourth."]]]
    files = []
    for index, share in enumerate(shares):
        path = tmp_path / f"share{index}.json"
        path.write_text(json.dumps(share), encoding="utf-8")
        files.append(path)

    sample = bench.run_configuration(files, threads=1)

    assert len(sample.child_rates) == 2 and all(rate > 0 for rate in sample.child_rates)
    # the timed part starts after both children loaded the model: well inside the processes' wall
    assert 0 < sample.embed_wall < sample.process_wall / 2
    assert sample.embed_cpu > 0
    assert sample.embedded == 4  # every distinct text of both shares, once
