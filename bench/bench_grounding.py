"""How well `ground`'s cosine threshold tells supported claims from unsupported ones, per strategy.

Run: ``.venv/bin/python bench/bench_grounding.py [--eval-set eval/corpus.jsonl] [-k 3] [--strategies a,b]``
(the store and embedding model of ``chunkyard.toml``; ``CHUNKYARD_CONFIG`` picks another), on a
store holding the eval set's documents (README "Search": the 23 documents of ``eval/corpus.jsonl``).

Claims are the eval set's reference excerpts: passages of the stored documents, one per reference.

* **Supported**: the excerpt grounded against the whole store (its document is there).
* **Unsupported**: the same excerpt grounded against the store without its document's family
  (the documents sharing its file stem: a page's HTML, PDF and DOCX renderings, a text's
  translations), so the claim is on the corpus's topics but in nothing that is searched.

Verbatim passages are the easiest supported claims there are (a paraphrase scores lower), and
claims about the same corpus the hardest unsupported ones: read the separation as an upper bound
on recall and a fair test of precision. Per strategy, the best cosine of the top ``k`` for each
claim, then precision / recall / F1 of "grounded" (best >= threshold) at the seed's 0.7, at the
default of this model (``search.engine.grounding_threshold_for``), and at the threshold that
maximizes F1; with the quantiles of both score sets. Then one threshold for every strategy at once
(what a default has to be): the F1-best over all claims pooled.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEED_THRESHOLD = 0.7


def family(doc_id: str) -> str:
    """The file stem before its first dot: ``html/howto_regex.html`` and ``pdf/howto_regex.pdf``
    are one family, as are ``txt/vim_tutor.de.txt`` and ``txt/vim_tutor.ja.txt``."""
    return doc_id.rsplit("/", 1)[-1].split(".", 1)[0]


def rates(positives: list[float], negatives: list[float], threshold: float) -> tuple[float, float, float]:
    """(precision, recall, F1) of "grounded" = score >= threshold, the positives being supported."""
    true = sum(s >= threshold for s in positives)
    false = sum(s >= threshold for s in negatives)
    precision = true / (true + false) if true + false else 1.0
    recall = true / len(positives) if positives else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def best_threshold(positives: list[float], negatives: list[float]) -> tuple[float, tuple[float, float, float]]:
    """The threshold (one of the scores) with the highest F1, and its rates; the highest on a tie."""
    candidates = sorted(set(positives) | set(negatives))
    best = max(candidates, key=lambda t: (rates(positives, negatives, t)[2], t))
    return best, rates(positives, negatives, best)


def quantiles(values: list[float]) -> str:
    q = statistics.quantiles(values, n=10) if len(values) > 1 else values * 9
    return f"{min(values):.3f} / {q[0]:.3f} / {statistics.median(values):.3f} / {q[-1]:.3f} / {max(values):.3f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--eval-set", default=str(ROOT / "eval" / "corpus.jsonl"))
    parser.add_argument("-k", type=int, default=3, help="evidence chunks per strategy (ground's default)")
    parser.add_argument("--strategies", help="comma-separated (default: every strategy in the store)")
    args = parser.parse_args(argv)

    from orchestration.settings import load_settings
    from search.engine import grounding_threshold_for, open_index
    from search.evaluation import load_eval_set

    settings = load_settings()
    index = open_index(settings)
    index.refresh()
    stored = {doc for (doc,) in index._con.execute("SELECT doc_id FROM parsed").fetchall()}
    claims = [(ref.excerpt, ref.doc) for q in load_eval_set(args.eval_set) for ref in q.references
              if ref.excerpt and ref.doc in stored]
    names = args.strategies.split(",") if args.strategies else index.strategies(refresh=False)
    model_default = grounding_threshold_for(index.model_id)
    started = time.monotonic()
    vectors = index.embed([text for text, _ in claims])
    scores: dict[str, tuple[list[float], list[float]]] = {}
    for name in names:
        positives, negatives = [], []
        for (text, doc), vector in zip(claims, vectors):
            others = sorted(d for d in stored if family(d) != family(doc))
            for pool, into in ((None, positives), (others, negatives)):
                hits = index.search(text, mode="vector", k=args.k, strategy=name, doc_ids=pool, query_vector=vector,
                                    refresh=False)
                into.append(max((h.score for h in hits), default=0.0))
        scores[name] = (positives, negatives)
    print(f"store: {settings.db_path}; model {index.model_id}; eval set {args.eval_set}: {len(claims)} claims "
          f"(reference excerpts of {len({d for _, d in claims})} stored documents), k={args.k}; "
          f"{time.monotonic() - started:.0f} s")
    print("supported: the excerpt against the whole store; unsupported: against the store without its document's "
          "family. Best cosine quantiles: min / p10 / median / p90 / max. P / R / F1 of 'grounded'.\n")
    print(f"| strategy | supported | unsupported | at {SEED_THRESHOLD} (seed) | at {model_default} (this model's "
          "default) | F1-best threshold: P / R / F1 |")
    print("|---|---|---|---|---|---|")
    for name, (positives, negatives) in scores.items():
        at_seed = rates(positives, negatives, SEED_THRESHOLD)
        at_default = rates(positives, negatives, model_default)
        best, at_best = best_threshold(positives, negatives)
        print(f"| {name} | {quantiles(positives)} | {quantiles(negatives)} | "
              + " | ".join("{:.2f} / {:.2f} / {:.2f}".format(*r) for r in (at_seed, at_default))
              + f" | {best:.3f}: " + "{:.2f} / {:.2f} / {:.2f}".format(*at_best) + " |")
    pooled_pos = [s for p, _ in scores.values() for s in p]
    pooled_neg = [s for _, n in scores.values() for s in n]
    best, at_best = best_threshold(pooled_pos, pooled_neg)
    print(f"\nall strategies pooled: F1-best threshold {best:.3f} (P / R / F1 "
          + "{:.2f} / {:.2f} / {:.2f}".format(*at_best) + f"); at {SEED_THRESHOLD}: "
          + "{:.2f} / {:.2f} / {:.2f}".format(*rates(pooled_pos, pooled_neg, SEED_THRESHOLD))
          + f"; at {model_default}: " + "{:.2f} / {:.2f} / {:.2f}".format(*rates(pooled_pos, pooled_neg, model_default)))


if __name__ == "__main__":
    main()
