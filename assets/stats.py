"""``strategy_stats``: every strategy side by side, from what the store holds now.

One unpartitioned asset, so one page in the UI compares the strategies: a Markdown
table (chunks, documents, token percentiles, share over the model's max sequence),
a token-length histogram (inline SVG, also written beside the database), and one
numeric metadata entry per strategy and figure so the UI plots each over time.
"""

import base64
import math
from pathlib import Path

from dagster import AssetExecutionContext, AutomationCondition, MaterializeResult, MetadataValue, asset

from resources.embedding import EmbeddingModelResource
from resources.stats import StrategyStats, chunk_texts, over_limit_counts, strategy_stats, token_histogram
from resources.store import StoreResource

HISTOGRAM_BINS = 20  # bars per strategy; the bin width follows the longest chunk


def histogram_bin_width(longest: int, bins: int = HISTOGRAM_BINS) -> int:
    """A round bin width (1, 2, 5 x 10^k) giving at most ``bins`` bars up to ``longest``."""
    raw = max(1, math.ceil((longest + 1) / bins))
    for magnitude in (10 ** k for k in range(0, 12)):
        for step in (1, 2, 5):
            if step * magnitude >= raw:
                return step * magnitude
    return raw


def stats_table(stats: list[StrategyStats], over: dict[str, tuple[int, int]], limit: int) -> str:
    """The side-by-side comparison as a Markdown table."""
    lines = [
        f"| strategy | chunks | documents | p10 | p50 | p90 | p99 | max | mean | over {limit} word pieces |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in stats:
        n_over, total = over.get(s.strategy, (0, 0))
        share = f"{n_over} ({n_over / total:.1%})" if total else "0"
        lines.append(
            f"| `{s.strategy}` | {s.chunks} | {s.documents} | {s.p10} | {s.p50} | {s.p90} | {s.p99} | "
            f"{s.max} | {s.mean} | {share} |"
        )
    return "\n".join(lines)


def histogram_svg(histograms: dict[str, dict[int, int]], bin_width: int) -> str:
    """Small multiples: one row of bars per strategy on a shared token axis."""
    strategies = sorted(histograms)
    top = max((start for h in histograms.values() for start in h), default=0) + bin_width
    n_bins = max(1, top // bin_width)
    label_w, plot_w, row_h, gap, axis_h = 130, 480, 60, 14, 28
    bar_w = plot_w / n_bins
    height = len(strategies) * (row_h + gap) + axis_h
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + plot_w + 20}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="white"/>',
    ]
    for row, strategy in enumerate(strategies):
        counts = histograms[strategy]
        peak = max(counts.values(), default=1)
        y0 = row * (row_h + gap)
        parts.append(f'<text x="4" y="{y0 + row_h / 2 + 4}">{strategy}</text>')
        parts.append(f'<text x="{label_w - 4}" y="{y0 + 10}" text-anchor="end" fill="#666">{peak}</text>')
        for start, n in counts.items():
            h = row_h * n / peak
            x = label_w + (start // bin_width) * bar_w
            parts.append(
                f'<rect x="{x:.1f}" y="{y0 + row_h - h:.1f}" width="{max(bar_w - 1, 1):.1f}" height="{h:.1f}" '
                f'fill="#4c78a8"><title>{strategy}: {n} chunk(s) of {start}-{start + bin_width - 1} tokens</title></rect>'
            )
        parts.append(f'<line x1="{label_w}" x2="{label_w + plot_w}" y1="{y0 + row_h}" y2="{y0 + row_h}" stroke="#999"/>')
    y_axis = len(strategies) * (row_h + gap) + 4
    for i in range(0, n_bins + 1, max(1, n_bins // 5)):
        x = label_w + i * bar_w
        parts.append(f'<text x="{x:.1f}" y="{y_axis + 10}" text-anchor="middle" fill="#666">{i * bin_width}</text>')
    parts.append(f'<text x="{label_w + plot_w / 2}" y="{y_axis + 22}" text-anchor="middle">tokens per chunk (cl100k)</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def stats_metadata(
    stats: list[StrategyStats], over: dict[str, tuple[int, int]], limit: int, svg: str, svg_path: Path
) -> dict[str, object]:
    """What the asset shows: the table and picture, plus one number per strategy and figure (plotted over time)."""
    image = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    metadata: dict[str, object] = {
        "strategies": MetadataValue.md(stats_table(stats, over, limit)),
        "token_histogram": MetadataValue.md(f"![token length histogram](data:image/svg+xml;base64,{image})"),
        "token_histogram_file": MetadataValue.path(str(svg_path)),
        "model_max_sequence": limit,
        "dagster/row_count": sum(s.chunks for s in stats),
    }
    for s in stats:
        n_over, total = over.get(s.strategy, (0, 0))
        metadata.update({
            f"{s.strategy}/chunks": s.chunks,
            f"{s.strategy}/documents": s.documents,
            f"{s.strategy}/tokens_p50": s.p50,
            f"{s.strategy}/tokens_p90": s.p90,
            f"{s.strategy}/tokens_p99": s.p99,
            f"{s.strategy}/tokens_max": s.max,
            f"{s.strategy}/over_model_max_share": round(n_over / total, 4) if total else 0.0,
        })
    return metadata


def build_stats_asset(upstream: list) -> object:
    """``strategy_stats`` downstream of every strategy's embeddings (so it refreshes after them)."""

    @asset(
        name="strategy_stats",
        group_name="stats",
        deps=upstream,
        pool="duckdb",
        kinds={"duckdb"},
        automation_condition=AutomationCondition.eager(),
        description="Every strategy side by side, from the chunks stored now: chunks, documents, token "
        "percentiles, share longer than the embedding model reads, and a token-length histogram.",
    )
    def strategy_stats_asset(
        context: AssetExecutionContext, store: StoreResource, embedding: EmbeddingModelResource
    ) -> MaterializeResult:
        embedder = embedding.get_embedder()
        limit = embedder.max_seq_length
        with store.store().connect(read_only=True) as con:
            stats = strategy_stats(con)
            width = histogram_bin_width(max((s.max for s in stats), default=0))
            histograms = token_histogram(con, width)
            over = over_limit_counts(chunk_texts(con), embedder.count_model_tokens, limit)
        svg = histogram_svg(histograms, width)
        svg_path = Path(store.path).resolve().parent / "stats" / "token_histogram.svg"
        try:
            svg_path.parent.mkdir(parents=True, exist_ok=True)
            svg_path.write_text(svg, encoding="utf-8")
        except OSError as exc:  # the metadata still carries the picture
            context.log.warning(f"could not write {svg_path}: {exc}")
        return MaterializeResult(metadata=stats_metadata(stats, over, limit, svg, svg_path))

    return strategy_stats_asset
