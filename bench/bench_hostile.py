"""The large hostile inputs of issue 12, with peak memory and time per file under
the default limits (``chunking.limits.DocumentLimits()``).

Run: ``.venv/bin/python bench/bench_hostile.py [--dir DIR] [--pipeline]``

Generates (once; reused from ``--dir``, default ``/tmp/chunkyard-hostile-bench``):

* ``page.html``   ~50 MB of HTML (under the 50 MiB size cap; ~49 M characters of text)
* ``bloat.docx``  a DOCX whose word/document.xml is ~180 MB of XML at ~7:1
* ``dump.json``   ~200 MB of JSON (over the size cap)

Table 1, per file, each in a fresh process doing what ``raw_documents`` and
``parsed_documents`` do (stream-hash the file, then ``parse_in_worker`` with the
default limits): the outcome, seconds, the ratio of those seconds to one streamed
sha256 of the same file (measured in the same run: the machine is shared), and the
peak resident memory of the whole process tree (the process, the forkserver and
the parse worker), sampled from /proc every 20 ms.

``--pipeline`` adds Table 2: ``python -m orchestration.cli run`` over a folder of
the three files (temporary database and Dagster instance), its exit code, seconds
and the peak RSS of its process tree (the issue's "peak RSS of a run"); then the
same command again on the unchanged folder, which must select nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MB = 1_000_000
_W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


# -- generators (seeded: the same bytes every run) ------------------------------------


def _vocabulary(rng: random.Random, size: int = 4000) -> list[str]:
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    return ["".join(rng.choices(letters, k=rng.randint(2, 9))) for _ in range(size)]


def _sentences(rng: random.Random, words: list[str]):  # noqa: ANN202 - a generator of str
    while True:
        yield " ".join(rng.choices(words, k=rng.randint(8, 20))).capitalize() + "."


def make_html(path: Path, target: int = 50 * MB) -> None:
    rng = random.Random(1)
    sentences = _sentences(rng, _vocabulary(rng))
    with open(path, "w", encoding="utf-8") as out:
        out.write("<!doctype html><html><head><title>Big</title></head><body>\n")
        written, section = 0, 0
        while written < target - 200:
            section += 1
            piece = f"<h2>Section {section}</h2>\n<p>{' '.join(next(sentences) for _ in range(6))}</p>\n"
            out.write(piece)
            written += len(piece)
        out.write("</body></html>\n")


def make_docx(path: Path, xml_target: int = 180 * MB) -> None:
    rng = random.Random(2)
    words = _vocabulary(rng, 120)  # a small vocabulary: ~7:1, as the file
    sentences = _sentences(rng, words)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/'
                                          'package/2006/content-types"/>')
        with z.open("word/document.xml", "w", force_zip64=True) as out:
            out.write(f'<?xml version="1.0"?><w:document {_W}><w:body>'.encode())
            written = 0
            while written < xml_target:
                runs = "".join(f'<w:r><w:rPr><w:b w:val="0"/><w:sz w:val="22"/></w:rPr><w:t xml:space="preserve">'
                               f'{next(sentences)} </w:t></w:r>' for _ in range(4))
                piece = f'<w:p><w:pPr><w:pStyle w:val="BodyText"/><w:spacing w:after="120"/></w:pPr>{runs}</w:p>'.encode()
                out.write(piece)
                written += len(piece)
            out.write(b"</w:body></w:document>")


def make_json(path: Path, target: int = 200 * MB) -> None:
    rng = random.Random(3)
    sentences = _sentences(rng, _vocabulary(rng))
    with open(path, "w", encoding="utf-8") as out:
        out.write('{"records": [')
        written, n = 0, 0
        while written < target:
            piece = ("," if n else "") + json.dumps({"id": n, "text": next(sentences)})
            out.write(piece)
            written += len(piece)
            n += 1
        out.write("]}\n")


FILES = {"page.html": make_html, "bloat.docx": make_docx, "dump.json": make_json}


def ensure_files(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in FILES.items():
        path = folder / name
        if not path.exists():
            print(f"generating {path} ...", file=sys.stderr, flush=True)
            tmp = path.with_suffix(path.suffix + ".tmp")
            make(tmp)
            tmp.replace(path)
        paths.append(path)
    return paths


# -- measuring ----------------------------------------------------------------------------


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = int(fields[21]) * page
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        total += rss.get(current, 0)
        stack.extend(children.get(current, []))
    return total


def run_measured(command: list[str], env: dict[str, str] | None = None) -> tuple[int, float, int, str]:
    """(exit code, seconds, peak tree RSS in bytes, stdout) of one command."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = proc.communicate()
    done.set()
    sampler.join()
    return proc.returncode, time.perf_counter() - started, peak, output


def hash_seconds(path: Path) -> float:
    from resources.documents import sha256_file

    started = time.perf_counter()
    sha256_file(path)
    return time.perf_counter() - started


def parse_one(path: Path) -> None:
    """The child of Table 1: what the document assets do with one file, default limits."""
    from chunking.limits import DocumentLimits
    from chunking.parsers import DocumentError
    from chunking.parsers.worker import parse_in_worker
    from resources.documents import sha256_file

    limits = DocumentLimits()
    sha256_file(path)
    if path.stat().st_size > limits.max_bytes:
        print(f"refused: size {path.stat().st_size} > limits.max_bytes {limits.max_bytes}")
        return
    try:
        doc = parse_in_worker(path, path.name, limits)
        print(f"parsed: {len(doc.text)} chars, {len(doc.blocks)} blocks")
    except DocumentError as err:
        print(f"refused: {err.cause}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "chunkyard-hostile-bench")
    parser.add_argument("--pipeline", action="store_true", help="also run the CLI over the three files")
    parser.add_argument("--parse-one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.parse_one:
        parse_one(args.parse_one)
        return
    paths = ensure_files(args.dir / "docs")
    print("Table 1: one file at a time, default limits (peak RSS: the whole process tree)")
    print(f"{'file':<12} {'MB':>7} {'seconds':>8} {'x sha256':>9} {'peak RSS MB':>12}  outcome")
    worst = 0
    for path in paths:
        reference = hash_seconds(path)
        code, seconds, peak, output = run_measured([sys.executable, __file__, "--parse-one", str(path)])
        worst = max(worst, peak)
        outcome = output.strip().splitlines()[-1] if output.strip() else f"exit {code}"
        print(f"{path.name:<12} {path.stat().st_size / MB:>7.1f} {seconds:>8.1f} {seconds / reference:>9.1f} "
              f"{peak / MB:>12.0f}  {outcome[:150]}")
    print(f"worst peak RSS: {worst / MB:.0f} MB")
    if args.pipeline:
        work = Path(tempfile.mkdtemp(prefix="chunkyard-hostile-run-"))
        env = {**os.environ, "CHUNKYARD_DB": str(work / "db.duckdb"), "DAGSTER_HOME": str(work / "dagster"),
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        command = [sys.executable, "-m", "orchestration.cli", "run", "--docs", str(args.dir / "docs")]
        print("\nTable 2: python -m orchestration.cli run over the three files (default limits), twice")
        print(f"{'run':<10} {'exit':>4} {'seconds':>8} {'peak RSS MB':>12}  first line")
        outputs = []
        for label in ("first", "unchanged"):
            code, seconds, peak, output = run_measured(command, env)
            outputs.append(output)
            first = next((line for line in output.splitlines() if line.startswith("chunkyard:")), "")
            print(f"{label:<10} {code:>4} {seconds:>8.1f} {peak / MB:>12.0f}  {first[:140]}")
        print("\n".join("  | " + line for line in outputs[0].strip().splitlines()[-8:]))

if __name__ == "__main__":
    main()
