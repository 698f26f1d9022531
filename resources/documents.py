"""The documents folder: which files exist, and their partition keys.

A partition key is the file's path relative to the folder, cleaned of the
characters that break Dagster's partition selection (``|``, ``,``, ``[``, ``]``,
control characters). Cleaning can make two paths collide; the later one (in
sorted order) then gets a short hash of its real path appended, so every file
keeps its own partition and the mapping is a pure function of the folder listing.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from dagster import ConfigurableResource
from pydantic import Field

from chunking.parsers import SUPPORTED_EXTENSIONS, is_sidecar_path

_UNSAFE = re.compile(r"[|,\[\]\x00-\x1f\x7f]")
DEFAULT_MAX_BYTES = 50 * 1024 * 1024


def clean_partition_key(relative_path: str) -> str:
    key = _UNSAFE.sub("_", relative_path.replace("\\", "/"))
    return key.strip() or "_"


@dataclass(frozen=True)
class SourceFile:
    doc_id: str
    path: Path
    relative_path: str
    size_bytes: int


def is_document(path: Path) -> bool:
    """A file we ingest: a supported extension, not hidden, not a sidecar of another file."""
    if path.name.startswith(".") or is_sidecar_path(path):
        return False
    return path.suffix.lower() in SUPPORTED_EXTENSIONS


def scan_folder(root: Path) -> dict[str, SourceFile]:
    """doc_id -> SourceFile for every document under ``root`` (recursively)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"documents folder {root} does not exist or is not a directory")
    files = sorted(
        p for p in root.rglob("*") if p.is_file() and is_document(p) and not any(
            part.startswith(".") for part in p.relative_to(root).parts[:-1]
        )
    )
    out: dict[str, SourceFile] = {}
    for path in files:
        rel = path.relative_to(root).as_posix()
        key = clean_partition_key(rel)
        if key in out:
            key = f"{key}~{hashlib.sha1(rel.encode('utf-8')).hexdigest()[:8]}"
        out[key] = SourceFile(doc_id=key, path=path, relative_path=rel, size_bytes=path.stat().st_size)
    return out


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class DocumentsFolder(ConfigurableResource):
    """The folder of source documents the sensor watches and the assets read."""

    root: str = Field(default="examples/docs", description="Folder scanned recursively.")
    max_bytes: int = Field(default=DEFAULT_MAX_BYTES, ge=1, description="Larger files fail their partition.")

    @property
    def root_path(self) -> str:
        """The folder as an absolute path: how stored documents remember where they came from."""
        return str(Path(self.root).resolve())

    def scan(self) -> dict[str, SourceFile]:
        return scan_folder(Path(self.root))
