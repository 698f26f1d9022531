"""The retrieval variant offered in chunkyard.toml is the configuration the README measured.

chunkyard.toml carries, commented out, ``[variants.paragraph_late]``: the configuration aimed
at the best retrieval for the default model (README "Search, grounding and evaluation").
Its figures come from ``bench/bench_retrieval.py``'s ``p100+ctx+late+blend0.3`` row; this test keeps
the two the same configuration, so a change to either shows here.
"""

from orchestration.settings import load_settings
from tests.conftest import REPO_ROOT, load_bench

VARIANT = "paragraph_late"
MEASURED_AS = "p100+ctx+late+blend0.3"


def commented_block(text: str, header: str) -> str:
    """The TOML table ``header`` as chunkyard.toml shows it, commented out with ``#   ``, uncommented."""
    lines = text.splitlines()
    start = lines.index(f"#   {header}")
    block = []
    for line in lines[start:]:
        if not line.startswith("#   "):
            break
        block.append(line[len("#   "):])
    return "\n".join(block) + "\n"


def test_the_commented_retrieval_variant_is_the_measured_configuration(tmp_path):
    shipped_text = (REPO_ROOT / "chunkyard.toml").read_text(encoding="utf-8")
    config = tmp_path / "chunkyard.toml"
    config.write_text(shipped_text + "\n" + commented_block(shipped_text, f"[variants.{VARIANT}]"), encoding="utf-8")
    settings = load_settings(config)
    instance = {i.name: i for i in settings.strategy_instances()}[VARIANT]

    configurations = load_bench("bench_retrieval").all_configurations(load_settings(REPO_ROOT / "chunkyard.toml"))
    measured = configurations[MEASURED_AS]
    spec = instance.spec
    assert spec.name == measured.strategy
    # The bench applies its overrides on the shipped strategy's table; the variant's table is
    # its whole config over the library defaults: the same config either way.
    assert instance.config == spec.parse_config({**settings.strategies.get(measured.strategy, {}),
                                                 **measured.overrides})
    assert instance.embed_context == measured.embed_context()
    assert instance.embed_context.headings and instance.embed_context.late_tokens == 256
    assert instance.embed_context.late_blend == 0.3
