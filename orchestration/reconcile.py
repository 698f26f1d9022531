"""What changed in the documents folder since we last looked: new, changed,
deleted. One pure function, shared by the sensor and the CLI so both agree."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class FolderChanges:
    new: dict[str, str] = field(default_factory=dict)  # doc_id -> sha256
    changed: dict[str, str] = field(default_factory=dict)  # doc_id -> new sha256
    deleted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    @property
    def to_process(self) -> dict[str, str]:
        return {**self.new, **self.changed}


def diff_folder(current: dict[str, str], known: dict[str, str]) -> FolderChanges:
    """Compare the folder's doc_id -> sha256 with what was processed before."""
    new = {d: sha for d, sha in current.items() if d not in known}
    changed = {d: sha for d, sha in current.items() if d in known and known[d] != sha}
    unchanged = sorted(d for d, sha in current.items() if known.get(d) == sha)
    deleted = sorted(d for d in known if d not in current)
    return FolderChanges(new=new, changed=changed, deleted=deleted, unchanged=unchanged)
