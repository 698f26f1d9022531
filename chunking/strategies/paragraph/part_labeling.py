"""PartLabeling (seed §4.4): ``[part n]`` on the pieces of one content line."""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from chunking.strategies.paragraph.model import Section, _strip_part_suffix


def run(sections: Sequence[Section]) -> list[Section]:
    """PartLabeling: the fragments of one content line get ``[part 1]``, ``[part 2]``, ...

    ``sections`` all come from one content line. ``parent_headings`` never gets a
    suffix, and a line left whole keeps its heading as it was.
    """
    if len(sections) <= 1:
        return list(sections)
    out = []
    for n, sec in enumerate(sections, start=1):
        base = _strip_part_suffix(sec.heading)
        out.append(replace(sec, heading=f"{base} [part {n}]" if base else f"[part {n}]", base_heading=base))
    return out
