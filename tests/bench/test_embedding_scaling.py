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
    return bench.Sample(embed_wall=wall, embed_cpu=wall, process_wall=process_wall, child_rates=rates, embedded=90,
                        start_spread=0.0)


def _cells(line):
    return [cell.strip() for cell in line.split("|")[1:-1]]


def test_table_ratios_are_to_the_best_one_process_row_of_each_column():
    rows = [bench.Row(label, processes, threads) for label, processes, threads in bench.CONFIGURATIONS]
    # embed walls: the 2-thread row is the faster 1-process row; process walls: the 1-thread row is
    rows[0].samples = [_sample(3.0, 20.0, [100 / 3.0]), _sample(3.2, 22.0, [100 / 3.2])]  # medians 3.1, 21.0
    rows[1].samples = [_sample(5.0, 16.0, [20.0]), _sample(5.0, 16.0, [20.0])]
    rows[2].samples = [_sample(2.79, 12.0, [18.0, 19.0]), _sample(2.79, 12.0, [19.0, 20.0])]

    lines = bench.table(rows, 100).splitlines()

    header = _cells(lines[0])
    two, one_thread, two_threads = _cells(lines[4]), _cells(lines[3]), _cells(lines[2])
    column = {name: index for index, name in enumerate(header)}
    assert two[0] == "2 processes, 1 thread each"
    assert two[column["texts embedded"]] == "90"
    assert two[column["embed wall s (median; min-max)"]] == "2.79 (2.79-2.79)"
    assert two[column["chunk texts/s"]] == "35.8"  # 100 texts / 2.79 s
    assert two[column["ratio to best 1 process"]] == "0.90"  # 2.79 / 3.1 (the 2-thread row)
    assert one_thread[column["ratio to best 1 process"]] == f"{5.0 / 3.1:.2f}"
    assert two[column["its ratio"]] == "0.75"  # 12.0 / 16.0 (the 1-thread row is best here)
    assert two_threads[column["its ratio"]] == f"{21.0 / 16.0:.2f}"
    # median child rate 19.0 / the 1-thread process's 20.0
    assert two[column["per-process speed vs 1 process, 1 thread"]] == "0.95"


def test_a_child_that_fails_stops_the_bench_and_leaves_no_process(tmp_path, monkeypatch):
    broken = tmp_path / "calls.json"
    broken.write_text("not json", encoding="utf-8")
    healthy = tmp_path / "never.json"
    healthy.write_text("[]", encoding="utf-8")
    started = []

    class RecordedPopen(bench.subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    monkeypatch.setattr(bench.subprocess, "Popen", RecordedPopen)

    with pytest.raises(SystemExit, match="ended while getting ready"):
        bench.run_configuration([broken, healthy], threads=1)

    assert len(started) == 2
    assert all(process.returncode is not None for process in started)  # the healthy one killed, not left to run


@pytest.mark.model
def test_children_wait_for_go_and_embed_their_share_once(tmp_path):
    shares = [[["A sentence about chunking.", "Another one."], ["Third text here.", "Another one."]], [["Fourth."]]]
    files = []
    for index, share in enumerate(shares):
        path = tmp_path / f"share{index}.json"
        path.write_text(json.dumps(share), encoding="utf-8")
        files.append(path)

    sample = bench.run_configuration(files, threads=1)

    assert len(sample.child_rates) == 2 and all(rate > 0 for rate in sample.child_rates)
    assert sample.embedded == 4  # "Another one." twice in one child's calls: embedded once, as the cache would
    # both timed parts began after "go", which came after both children had loaded the model
    assert 0 <= sample.start_spread < sample.embed_wall < sample.process_wall / 2
    assert sample.embed_cpu > 0
