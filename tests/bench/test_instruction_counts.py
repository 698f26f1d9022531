"""``bench/bench_strategies.py --instructions``: callgrind's dumps read back into one row per chunker.

The bench runs one child under callgrind with ``--dump-before=getppid`` and calls
``os.getppid()`` around each measured region, so every region is a dump ("part") of its own.
These tests feed the reader dumps shaped like callgrind's and check that each chunker gets
its own encode's and its own region's instructions, and that a stray marker call is refused
rather than shifting every row by one part.
"""

import pytest

from tests.conftest import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_strategies")


def write_dump(path, part, total, header="summary"):
    # The lines callgrind writes before the first function; a last part has no ".N" suffix.
    path.write_text(f"# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 7\ncmd:  python x\n"
                    f"part: {part}\n\ndesc: I1 cache: \ntimerange: Basic block 0 - 1\n"
                    f"trigger: --dump-before=getppid\n\npositions: line\nevents: Ir\n{header}: {total}\n\n"
                    f"fn=(1) main\n0 {total}\n")


def test_each_chunker_gets_the_encode_and_the_region_measured_for_it(bench, tmp_path):
    # Two chunkers: parts 1 (start), 2 (encode), 3 (garbage collection), 4 (first), 5 (warm-up),
    # 6 (encode), 7 (garbage collection), 8 (second), 9 (exit).
    totals = {1: 900, 2: 1000, 3: 333, 4: 1250, 5: 77, 6: 1010, 7: 444, 8: 1500, 9: 5}
    for part, total in totals.items():
        name = "callgrind.out" if part == 9 else f"callgrind.out.{part}"
        write_dump(tmp_path / name, part, total, header="totals" if part == 5 else "summary")
    parts = bench.callgrind_parts(tmp_path)
    assert parts == totals
    rows = bench.rows_from_parts(parts, ["chunkyard a", "chunkyard b"], [12, 34])
    assert rows == [("chunkyard a", 1000, 1250, 12), ("chunkyard b", 1010, 1500, 34)]
    table = bench.instruction_table(rows)
    assert "| chunkyard a | 1.250 | 0.0 | 0.0 | 12 |" in table
    assert "| chunkyard b | 1.485 ** |" in table  # above the 1.3x target: flagged


def test_a_stray_marker_call_is_refused_not_shifted(bench, tmp_path):
    for part in range(1, 7):  # one chunker wants parts 1..5; a sixth means another getppid() call
        write_dump(tmp_path / f"callgrind.out.{part}", part, 100 * part)
    with pytest.raises(SystemExit, match="expected 1..5"):
        bench.rows_from_parts(bench.callgrind_parts(tmp_path), ["chunkyard a"], [1])


def test_a_file_that_is_not_a_dump_is_refused(bench, tmp_path):
    (tmp_path / "callgrind.out").write_text("not callgrind\n")
    with pytest.raises(SystemExit, match="not a callgrind dump"):
        bench.callgrind_parts(tmp_path)
