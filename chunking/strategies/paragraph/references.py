"""Reference dropping (LightRAG P's ``drop_references``): a paper's reference section left out.

Runs before HeadingBlocks, on the sidecar's blocks. A content block is a
reference block when its heading starts with one of the reference headings
(default ``References``, ``Bibliography``, ``参考文献``): a heading with a Latin
letter is matched case-insensitively and must end at a word boundary
("References and notes" matches, "Referenced works" does not); any other (CJK)
is a plain prefix. With ``tail_n > 0`` only the last ``tail_n`` content blocks
are searched (a safety window for a mid-document "References" subsection);
``0`` searches every block.

Invariant: never everything. When every content block would be dropped, none is
(and a warning says so): a document is never silently emptied.

LightRAG reads the two knobs live from the environment on every call
(:func:`settings_from_env`: ``CHUNK_P_REFERENCES_HEADINGS``, pipe-separated,
and ``CHUNK_P_REFERENCES_TAIL_N``) and the switch's default from
``CHUNK_P_DROP_REFERENCES``; chunkyard's compat layer does the same. The native
strategy takes all three from its config instead, so that changing them changes
the config hash and marks the chunks stale.
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Sequence

from chunking.model import Block
from chunking.strategies.paragraph.model import DEFAULT_REFERENCES_HEADINGS, DEFAULT_REFERENCES_TAIL_N, log

_TRUE = frozenset({"1", "true", "yes", "on"})


def settings_from_env(environ: Mapping[str, str] | None = None) -> tuple[tuple[str, ...], int]:
    """``(headings, tail_n)`` from ``CHUNK_P_REFERENCES_HEADINGS`` / ``CHUNK_P_REFERENCES_TAIL_N``.

    Unset or empty means the default; a tail window that is not an integer or is
    negative falls back to the default with a warning.
    """
    env = os.environ if environ is None else environ
    raw_headings = env.get("CHUNK_P_REFERENCES_HEADINGS", "")
    headings = tuple(h.strip() for h in raw_headings.split("|") if h.strip()) or DEFAULT_REFERENCES_HEADINGS
    raw_tail = env.get("CHUNK_P_REFERENCES_TAIL_N", "").strip()
    tail_n = DEFAULT_REFERENCES_TAIL_N
    if raw_tail:
        try:
            tail_n = int(raw_tail)
        except ValueError:
            tail_n = -1
        if tail_n < 0:
            log.warning(
                "paragraph_semantic: CHUNK_P_REFERENCES_TAIL_N=%r is not a non-negative integer; using %d",
                raw_tail, DEFAULT_REFERENCES_TAIL_N,
            )
            tail_n = DEFAULT_REFERENCES_TAIL_N
    return headings, tail_n


def drop_references_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """``CHUNK_P_DROP_REFERENCES`` as a switch (``true``/``1``/``yes``/``on``); false when unset."""
    env = os.environ if environ is None else environ
    return env.get("CHUNK_P_DROP_REFERENCES", "").strip().lower() in _TRUE


def heading_pattern(headings: Sequence[str]) -> re.Pattern[str]:
    """One pattern matching a heading that starts with any of ``headings`` (see the module docstring)."""
    parts = []
    for heading in headings:
        escaped = re.escape(heading)
        parts.append(f"(?i:{escaped})\\b" if re.search(r"[A-Za-z]", heading) else escaped)
    return re.compile("|".join(parts) if parts else "(?!)")


def reference_blocks(blocks: Sequence[Block], headings: Sequence[str], tail_n: int = 0) -> list[int]:
    """Indices of the reference blocks among ``blocks`` (empty when they would be all of them)."""
    content = [i for i, b in enumerate(blocks) if b.content.strip()]
    window = content[-tail_n:] if tail_n > 0 else content
    pattern = heading_pattern(headings)
    found = [i for i in window if pattern.match((blocks[i].heading or "").strip())]
    if found and len(found) == len(content):
        log.warning(
            "paragraph_semantic: drop_references would drop every block (all headed %s); keeping them",
            sorted({blocks[i].heading for i in found}),
        )
        return []
    return found


def run(blocks: Sequence[Block], headings: Sequence[str], tail_n: int = 0) -> list[Block]:
    """``blocks`` with the reference blocks emptied (not removed: source indices stay valid)."""
    dropped = reference_blocks(blocks, headings, tail_n)
    if not dropped:
        return list(blocks)
    log.info("paragraph_semantic: drop_references dropped %d block(s): %s",
             len(dropped), [blocks[i].heading for i in dropped])
    drop = set(dropped)
    return [b.model_copy(update={"content": ""}) if i in drop else b for i, b in enumerate(blocks)]
