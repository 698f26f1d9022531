"""The lineage link: every asset group of the definitions, in the form the UI reads
(the browser test opens it in a fresh profile; this keeps the README's copy in step)."""

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from orchestration.cli import UI_BASE, asset_group_names, lineage_url

README = Path(__file__).resolve().parents[2] / "README.md"


def test_lineage_link_opens_every_group_of_the_definitions():
    from orchestration import definitions

    groups = asset_group_names(definitions.defs)
    assert {"documents", "chunks", "embeddings", "stats"} <= set(groups)
    url = lineage_url(UI_BASE, groups)
    parts = urlsplit(url)
    assert parts.path == "/asset-groups"
    (expanded,) = parse_qs(parts.query)["expanded"]
    assert expanded.split(",") == [f"global@global:{g}" for g in groups]
    assert f"<{url}>" in README.read_text(encoding="utf-8")  # the README gives the link the CLI prints
