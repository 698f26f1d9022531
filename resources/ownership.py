"""One database per Dagster instance and per folder of side outputs.

A database claims its documents folder (``ChunkStore.claim_source_root``). Two more
things are shared by path, not by database: the Dagster instance (``$DAGSTER_HOME``),
whose document partitions are the documents' ids, and the folder beside the database
(``parsed/`` sidecars, ``viewer/``, ``stats/``), whose files are named by those ids. Two
databases on one instance delete and run each other's partitions (a run of one folder
fails on the other's document, "no longer exists"); two in one folder delete each
other's sidecars when a same-named document goes. So each is claimed by the first
database that writes (a CLI run, or any run's store resource: from the UI, a sensor or the
schedule), in a marker file holding that database's resolved path, and a run of another
database stops before writing anything, naming what to set instead; the sensor and the
schedule skip their tick with the same message.

A claim whose database file is gone is taken over (its owner was deleted); the same file
under another path (a symlink, a moved project) is the same owner. Lake mode has no
database file to tell owners apart by, so it is not checked (README "One folder per
database").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from chunking.sidecar import write_atomic
from resources.store import SourceRootConflict

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from resources.store import StoreResource

INSTANCE_MARKER = "chunkyard-database"
OUTPUTS_MARKER = ".chunkyard-database"


def ownership_conflict(dagster_home: Path | None, db_path: Path | str, output_dirs: list[Path]) -> str | None:
    """Why ``db_path`` may not run on ``dagster_home`` or write into ``output_dirs``; None when it may.

    ``output_dirs[0]`` is the database's own folder; any other is a sidecar folder set in the config.
    ``dagster_home`` None: an instance no other process sees (ephemeral), so only the folders are checked.
    """
    database = Path(db_path).resolve()
    name = _name(database)
    marker = dagster_home / INSTANCE_MARKER if dagster_home is not None else None
    owner = _owner(marker) if marker is not None else None
    if dagster_home is not None and _another(owner, database):
        suggested = dagster_home.parent / f".dagster-{name}"
        if suggested == dagster_home:
            suggested = dagster_home.parent / f".dagster-{name}-2"
        return (f"the Dagster instance {dagster_home} (DAGSTER_HOME) keeps the runs and document partitions of "
                f"{owner}; it will not take {database} too (same-named documents would share a partition, and "
                f"each folder's run would delete or process the other's). Give this database its own instance, "
                f"e.g. DAGSTER_HOME={suggested} (or delete {marker} if this database is that one, copied or moved)")
    for index, folder in enumerate(dict.fromkeys(output_dirs)):
        marker = folder / OUTPUTS_MARKER
        owner = _owner(marker)
        if _another(owner, database):
            fix = (f"give this database a folder of its own, e.g. CHUNKYARD_DB={database.parent / name / database.name}"
                   if index == 0 else "set this database's sidecar_dir (chunkyard.toml) to a folder of its own")
            return (f"{folder} holds the side outputs (sidecars, viewer pages, statistics) of {owner}; it will not "
                    f"take {database}'s too (same-named documents would overwrite or delete each other's files): "
                    f"{fix} (or delete {marker} if this database is that one, copied or moved)")
    return None


def claim_instance_and_outputs(dagster_home: Path | None, db_path: Path | str, output_dirs: list[Path]) -> None:
    """Claim ``dagster_home`` (unless None) and each of ``output_dirs`` for ``db_path``: ``SourceRootConflict``
    when another database holds one (:func:`ownership_conflict`), else its marker names this one."""
    conflict = ownership_conflict(dagster_home, db_path, output_dirs)
    if conflict:
        raise SourceRootConflict(conflict)
    database = Path(db_path).resolve()
    if dagster_home is not None:
        _write_owner(dagster_home / INSTANCE_MARKER, database)
    for folder in dict.fromkeys(output_dirs):
        _write_owner(folder / OUTPUTS_MARKER, database)


def store_conflict(instance: "DagsterInstance", store: "StoreResource") -> str | None:
    """:func:`ownership_conflict` of ``store`` on ``instance`` (a sensor's or schedule's tick); None in lake
    mode, which is not checked."""
    if store.mode != "duckdb":
        return None
    return ownership_conflict(_home(instance), store.path, side_output_dirs(store.path, store.sidecar_path()))


def claim_for_store(instance: "DagsterInstance", store: "StoreResource") -> None:
    """:func:`claim_instance_and_outputs` of ``store`` on ``instance`` (a run's store resource); lake mode
    is not checked."""
    if store.mode == "duckdb":
        claim_instance_and_outputs(_home(instance), store.path, side_output_dirs(store.path, store.sidecar_path()))


def _home(instance: "DagsterInstance") -> Path | None:
    """The instance's folder (``$DAGSTER_HOME``), or None for an ephemeral one: it lives in one process, so
    no other database can share its partitions (``materialize()`` without an instance, tests)."""
    return None if instance.is_ephemeral else Path(instance.root_directory)


def side_output_dirs(db_path: Path | str, sidecar_dir: Path | str) -> list[Path]:
    """The folders a run writes files named by document id into: the database's own folder
    (``viewer/``, ``stats/`` and, by default, ``parsed/`` are inside it), and the sidecars'
    folder when it is configured elsewhere."""
    home, sidecars = Path(db_path).resolve().parent, Path(sidecar_dir).resolve()
    return [home] if sidecars.is_relative_to(home) else [home, sidecars]


def _name(database: Path) -> str:
    """A short name for suggestions: the file's stem, or its folder's name for the default file name."""
    return database.parent.name if database.stem == "chunkyard" and database.parent.name else database.stem


def _another(owner: Path | None, database: Path) -> bool:
    """Whether ``owner`` is a database other than ``database`` that still exists."""
    if owner is None or owner == database or not owner.exists():
        return False
    try:
        return not (database.exists() and owner.samefile(database))
    except OSError:
        return True


def _owner(marker: Path) -> Path | None:
    try:
        text = marker.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):  # none yet (or not a readable marker: written over below)
        return None
    return Path(text) if text else None


def _write_owner(marker: Path, database: Path) -> None:
    if _owner(marker) == database:
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(marker, f"{database}\n")
