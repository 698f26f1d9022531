"""The documents folder: which files exist, their partition keys, and which of
them may be read at all.

A partition key is the file's path relative to the folder. A path holding a
character that breaks Dagster's partition selection (``|``, ``,``, ``[``, ``]``,
control characters, surrounding blanks) is cleaned and gets ``~`` plus a short
hash of its original relative path appended, so a key depends on the file's own
path only, never on which other files exist (``x,y.txt`` is always
``x_y.txt~<hash>``, a real ``x_y.txt`` always ``x_y.txt``). A cleaned key cannot
collide with an ordinary one: an ordinary key ends in a document extension.

Nothing outside the folder is ever read: every file's real path is resolved, and
a symbolic link that leads outside the folder, or nowhere, is still listed (so
its document fails alone, with a message naming the rule) but carries a
``refusal`` and is never opened. So does a file that is not a regular file (a
named pipe, a socket, a device, or a link to one): opening a FIFO waits for a
writer forever and a device never ends. Symbolic links to directories are not followed.

A document's fingerprint (its data version) is the sha256 of its bytes, plus a
digest of the LightRAG sidecars beside it when it has any (``report.blocks.jsonl``,
``report.tables.json``): the parse reads them instead of the bytes, so editing,
adding or removing one is a change of the document as well (:func:`data_version`).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from dagster import ConfigurableResource
from pydantic import Field

from chunking.limits import DocumentLimits
from chunking.parsers import SUPPORTED_EXTENSIONS, FolderNames, is_sidecar_path, sha256_file, sidecars_beside

log = logging.getLogger(__name__)

# Surrogates too: a file name that is not valid UTF-8 comes back from the OS with its bad
# bytes as lone surrogates (surrogateescape), which no database or UI can hold.
_UNSAFE = re.compile(r"[|,\[\]\x00-\x1f\x7f\ud800-\udfff]")


def clean_partition_key(relative_path: str) -> str:
    """The partition key of one relative path: itself when it is safe, else the
    cleaned path plus ``~`` and 8 hex digits of sha1(original path)."""
    normalized = relative_path.replace("\\", "/")
    key = _UNSAFE.sub("_", normalized).strip() or "_"
    if key == relative_path:
        return key
    return f"{key}~{hashlib.sha1(relative_path.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"


@dataclass(frozen=True)
class SourceFile:
    """One document in the folder. ``path`` is where it is listed (maybe a link),
    ``real_path`` the file actually read. ``refusal`` is set, and the file never
    opened, when reading it would leave the folder or it does not exist."""

    doc_id: str
    path: Path
    relative_path: str
    size_bytes: int
    real_path: Path | None = None
    refusal: str | None = None

    @property
    def readable_path(self) -> Path:
        """The real path to open. Only call when ``refusal`` is None."""
        if self.refusal is not None:
            raise PermissionError(self.refusal)
        return self.real_path or self.path


def is_document(path: Path, folder_names: FolderNames | None = None) -> bool:
    """A file we ingest: a supported extension, not hidden, not a sidecar of another file
    (``folder_names``: the names of its folder, when the caller has listed it)."""
    if path.name.startswith(".") or path.suffix.lower() not in SUPPORTED_EXTENSIONS:
        return False
    return not is_sidecar_path(path, folder_names)


def is_inside(root: Path, real_path: Path) -> bool:
    """True when ``real_path`` (resolved) is ``root`` (resolved) or below it."""
    return real_path == root or root in real_path.parents


def _listed_files(root: Path) -> list[Path]:
    """Every non-hidden entry under ``root`` that is a file or a link to one (or a
    dangling link), without following links to directories."""
    found: list[Path] = []

    def unlisted(exc: OSError) -> None:
        # Its files cannot even be named (a path over PATH_MAX, no permission): said, not silent.
        log.warning("documents folder: cannot list %s: %s; its files are left out", exc.filename, exc.strerror or exc)

    for folder, dirs, files in os.walk(root, followlinks=False, onerror=unlisted):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not os.path.islink(os.path.join(folder, d)))
        found.extend(Path(folder) / name for name in files)
    return sorted(found)


def _special_file_kind(mode: int) -> str | None:
    """What a non-regular file is (``None`` for a regular one): opening a FIFO blocks until
    a writer comes, and a device (``/dev/zero``) never ends, so neither is ever opened."""
    for test, kind in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) else "not a regular file"


def _source(root: Path, real_root: Path, path: Path) -> SourceFile | None:
    """The listed ``path`` as a document (refused, never opened, where reading it would be
    wrong or cannot work); ``None`` when it no longer exists (gone since it was listed)."""
    rel = path.relative_to(root).as_posix()
    try:
        return _examined_source(root, real_root, path, rel)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a path over PATH_MAX, no permission to stat: this document alone
        return SourceFile(clean_partition_key(rel), path, rel, 0,
                          refusal=f"{rel}: refused: cannot be examined: {exc.strerror or exc}")


def _examined_source(root: Path, real_root: Path, path: Path, rel: str) -> SourceFile:
    key = clean_partition_key(rel)
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        # Its path is stored and shown everywhere, so the document is refused under a
        # printable name (bad bytes as \xNN) and never opened: renaming it is the fix.
        shown = rel.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return SourceFile(key, path, shown, 0, refusal=(
            f"{shown}: refused: its file name is not valid UTF-8; rename the file to read it"))
    if not path.is_symlink():
        info = path.lstat()
        kind = _special_file_kind(info.st_mode)
        if kind is not None:
            return SourceFile(key, path, rel, 0, refusal=f"{rel}: refused: {kind}; only regular files are read")
        return SourceFile(doc_id=key, path=path, relative_path=rel, size_bytes=info.st_size, real_path=path)
    link_size = path.lstat().st_size
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:  # dangling, or a loop of links
        loop = isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP
        return SourceFile(key, path, rel, link_size, refusal=(
            f"{rel}: refused: a loop of symbolic links (through {os.readlink(path)!r})" if loop else
            f"{rel}: refused: a dangling symbolic link (its target {os.readlink(path)!r} does not exist)"))
    if not is_inside(real_root, real):
        return SourceFile(key, path, rel, link_size, refusal=(
            f"{rel}: refused: a symbolic link to a file outside the documents folder; "
            f"only files inside {real_root} are read"))
    info = real.stat()
    kind = _special_file_kind(info.st_mode)
    if kind is not None:
        return SourceFile(key, path, rel, link_size, refusal=(
            f"{rel}: refused: a symbolic link to {kind}; only regular files are read"))
    return SourceFile(doc_id=key, path=path, relative_path=rel, size_bytes=info.st_size, real_path=real)


def scan_folder(root: Path) -> dict[str, SourceFile]:
    """doc_id -> SourceFile for every document under ``root`` (recursively),
    refused links included (with their ``refusal``)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"documents folder {root} does not exist or is not a directory")
    real_root = root.resolve()
    out: dict[str, SourceFile] = {}
    listed = _listed_files(root)
    names: dict[Path, list[str]] = {}
    for path in listed:
        names.setdefault(path.parent, []).append(path.name)
    folders = {folder: FolderNames(folder_files) for folder, folder_files in names.items()}
    for path in listed:
        if not is_document(path, folders[path.parent]):
            continue
        source = _source(root, real_root, path)
        if source is not None:
            out[source.doc_id] = source
    return out


def source_fingerprint(source: SourceFile) -> str:
    """What identifies a document's current content: its :func:`data_version` (sha256 of its
    real bytes, with its sidecars' digest when it has any), or for a refused link a digest of
    the refusal (it changes when the link does) so an unchanged refused link is not re-run.
    Never opens a refused file."""
    if source.refusal is not None:
        return "refused:" + hashlib.sha256(source.refusal.encode("utf-8", "surrogateescape")).hexdigest()
    path = source.readable_path
    return data_version(sha256_file(path), sidecars_digest(path))


def data_version(doc_sha256: str, sidecars: str | None) -> str:
    """The version of a document's content the store records and compares: the sha256 of its
    bytes alone when no sidecar is beside it (so a folder without sidecars keeps the versions
    it always had), else ``<sha256>+sidecars:<digest>``, which changes with the sidecars."""
    return doc_sha256 if sidecars is None else f"{doc_sha256}+sidecars:{sidecars}"


def sidecars_digest(path: Path) -> str | None:
    """16 hex digits of sha256 over the state of the sidecars the parse of the document at
    ``path`` looks for (``chunking.parsers.sidecars_beside``), or ``None`` when neither exists.

    Each one present counts by its bytes (streamed), or, never opened, by what else it is: a
    symbolic link by its target (the parse refuses to follow it), a FIFO or device by its kind,
    one that cannot be read by why. So any change of the sidecars changes the digest. (Not
    covered: what else can turn a sidecar's use around without touching it, the bytes of a
    namesake document it may describe, or ``trust_unhashed_sidecars``: ``--force`` re-reads.)"""
    parts = []
    for sidecar in sidecars_beside(path):
        try:
            info = sidecar.lstat()
        except OSError as exc:
            if _absent(exc):
                continue
            parts.append(f"{sidecar.name}: cannot be examined: {exc.strerror or exc}")
            continue
        try:
            if stat.S_ISLNK(info.st_mode):
                parts.append(f"{sidecar.name}: link to {os.readlink(sidecar)}")
            elif not stat.S_ISREG(info.st_mode):
                parts.append(f"{sidecar.name}: {_special_file_kind(info.st_mode)}")
            else:
                parts.append(f"{sidecar.name}: {sha256_file(sidecar)}")
        except FileNotFoundError:
            continue  # gone since the lstat
        except OSError as exc:
            parts.append(f"{sidecar.name}: cannot be read: {exc.strerror or exc}")
    if not parts:
        return None
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def sidecars_stat(source: SourceFile) -> list[list[int]]:
    """(size, mtime_ns, ctime_ns) of each sidecar beside a readable document (``[-1, -1, -1]``
    where there is none): with the document's own stat, what tells the sensor it need not hash
    it again (ctime: see orchestration.sensors)."""
    if source.refusal is not None:
        return []
    out = []
    for sidecar in sidecars_beside(source.readable_path):
        try:
            info = sidecar.lstat()
            out.append([info.st_size, info.st_mtime_ns, info.st_ctime_ns])
        except OSError as exc:
            out.append([-1, -1, -1] if _absent(exc) else [-2, exc.errno or 0, -2])
    return out


def _absent(exc: OSError) -> bool:
    """An lstat error that means no such sidecar: none there, or a name too long to exist (a
    document's stem near the file-name limit leaves no room for ".blocks.jsonl")."""
    return isinstance(exc, (FileNotFoundError, NotADirectoryError)) or exc.errno == errno.ENAMETOOLONG


def current_fingerprint(source: SourceFile) -> str | None:
    """:func:`source_fingerprint`, or ``None`` when the file is gone since it was listed; a file
    that cannot be read gets a digest of why, so it is processed, and its read fails, alone."""
    try:
        return source_fingerprint(source)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return unreadable_fingerprint(exc)


def unreadable_fingerprint(exc: OSError) -> str:
    """What stands for the bytes of a file that cannot be read: a digest of why. Recorded with its
    read error, it lets the next scan see the same file in the same state (not retried)."""
    return "unreadable:" + hashlib.sha256(str(exc).encode("utf-8", "surrogateescape")).hexdigest()


def source_stat(source: SourceFile) -> os.stat_result:
    """stat of what would be read; of the link itself for a refused one."""
    return source.path.lstat() if source.refusal is not None else source.readable_path.stat()


class DocumentsFolder(ConfigurableResource):
    """The folder of source documents the sensor watches and the assets read,
    with the per-document budget (``[limits]`` of chunkyard.toml)."""

    root: str = Field(default="examples/docs", description="Folder scanned recursively.")
    limits: dict[str, int] = Field(
        default_factory=dict, description="Overrides of chunking.limits.DocumentLimits (integers; 0/1 for flags).")

    @property
    def root_path(self) -> str:
        """The folder as an absolute path: how stored documents remember where they came from."""
        return str(Path(self.root).resolve())

    def document_limits(self) -> DocumentLimits:
        return DocumentLimits.model_validate(self.limits)

    def scan(self) -> dict[str, SourceFile]:
        return scan_folder(Path(self.root))
