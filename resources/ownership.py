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
under another path (a symlink, a moved project) is the same owner. In lake mode the owner
is the lake, named by its data path (``lake_owner``), so two lakes, or a lake and a database
file, are told apart the same way; a lake whose local data folder is gone is taken over.

The instance's claim is a file in ``$DAGSTER_HOME``, and a lake's is also kept in the instance's
own storage: the hosts of a cluster each have their own ``DAGSTER_HOME`` over one shared Dagster
database, where the runs and partitions two lakes would share live (README "One folder per
database").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from chunking.sidecar import write_atomic
from resources.store import SourceRootConflict

if TYPE_CHECKING:
    from dagster import DagsterInstance

    from resources.store import LakeConfig, StoreResource

INSTANCE_MARKER = "chunkyard-database"
OUTPUTS_MARKER = ".chunkyard-database"
# A marker naming a lake: this and its data path, tab-separated (a database file's marker holds
# its absolute path, which never starts so).
LAKE_OWNER = "ducklake"


def ownership_conflict(dagster_home: Path | None, db_path: Path | str, output_dirs: list[Path],
                       lake: "LakeConfig | None" = None) -> str | None:
    """Why ``db_path`` (or, given ``lake``, that lake, whose local outputs go beside ``db_path``) may not
    run on ``dagster_home`` or write into ``output_dirs``; None when it may.

    ``output_dirs[0]`` is the database's own folder; any other is a sidecar folder set in the config.
    ``dagster_home`` None: an instance no other process sees (ephemeral), so only the folders are checked.
    """
    database = _claimant(db_path, lake)
    name = _name(Path(db_path).resolve())
    marker = dagster_home / INSTANCE_MARKER if dagster_home is not None else None
    owner = _owner(marker) if marker is not None else None
    if dagster_home is not None and _another(owner, database):
        suggested = dagster_home.parent / f".dagster-{name}"
        if suggested == dagster_home:
            suggested = dagster_home.parent / f".dagster-{name}-2"
        return (f"the Dagster instance {dagster_home} (DAGSTER_HOME) keeps the runs and document partitions of "
                f"{_shown(owner)}; it will not take {_shown(database)} too (same-named documents would share a "
                f"partition, and each folder's run would delete or process the other's). Give this database its own "
                f"instance, "
                f"e.g. DAGSTER_HOME={suggested} (or delete {marker} if this database is that one, copied or moved)")
    for index, folder in enumerate(dict.fromkeys(output_dirs)):
        marker = folder / OUTPUTS_MARKER
        owner = _owner(marker)
        if _another(owner, database):
            own = Path(db_path).resolve()
            fix = (f"give this database a folder of its own, e.g. CHUNKYARD_DB={own.parent / name / own.name}"
                   if index == 0 else "set this database's sidecar_dir (chunkyard.toml) to a folder of its own")
            return (f"{folder} holds the side outputs (sidecars, viewer pages, statistics) of {_shown(owner)}; it "
                    f"will not take {_shown(database)}'s too (same-named documents would overwrite or delete each "
                    f"other's files): {fix} (or delete {marker} if this database is that one, copied or moved)")
    return None


def claim_instance_and_outputs(dagster_home: Path | None, db_path: Path | str, output_dirs: list[Path],
                               lake: "LakeConfig | None" = None) -> None:
    """Claim ``dagster_home`` (unless None) and each of ``output_dirs`` for ``db_path`` (or ``lake``):
    ``SourceRootConflict`` when another database holds one (:func:`ownership_conflict`), else its marker
    names this one."""
    conflict = ownership_conflict(dagster_home, db_path, output_dirs, lake)
    if conflict:
        raise SourceRootConflict(conflict)
    database = _claimant(db_path, lake)
    if dagster_home is not None:
        _write_owner(dagster_home / INSTANCE_MARKER, database)
    for folder in dict.fromkeys(output_dirs):
        _write_owner(folder / OUTPUTS_MARKER, database)


def store_conflict(instance: "DagsterInstance", store: "StoreResource") -> str | None:
    """:func:`ownership_conflict` of ``store`` on ``instance`` (a sensor's or schedule's tick); for a lake,
    also the claim kept in the instance's own storage (:func:`_stored_conflict`)."""
    lake = store.lake_config()
    conflict = ownership_conflict(_home(instance), store.path, side_output_dirs(store.path, store.sidecar_path()), lake)
    return conflict or (_stored_conflict(_stored_owner(instance), lake_owner(lake)) if lake is not None else None)


def claim_for_store(instance: "DagsterInstance", store: "StoreResource") -> None:
    """:func:`claim_instance_and_outputs` of ``store`` on ``instance`` (a run's store resource); a lake also
    claims the instance in its own storage, which every host of a cluster shares."""
    lake = store.lake_config()
    owner = lake_owner(lake) if lake is not None else None
    stored = _stored_owner(instance) if owner is not None else None  # read once: checked, then replaced
    if owner is not None and (conflict := _stored_conflict(stored, owner)):
        raise SourceRootConflict(conflict)
    claim_instance_and_outputs(_home(instance), store.path, side_output_dirs(store.path, store.sidecar_path()), lake)
    if owner is not None and stored != owner:
        _store_owner(instance, owner)


# A lake's claim on an instance is also kept in the instance's key-value storage (Dagster's ``kvs``
# table): the hosts of a cluster each have their own $DAGSTER_HOME, so the file there guards one
# host's folder, while the runs and partitions two lakes would share live in that storage.
INSTANCE_KEY = "chunkyard/database"


def _stored_owner(instance: "DagsterInstance") -> Path | str | None:
    if instance.is_ephemeral:
        return None
    try:
        value = instance.run_storage.get_cursor_values({INSTANCE_KEY}).get(INSTANCE_KEY)
    except Exception:  # noqa: BLE001 - a storage without a key-value table: the file claims stand alone
        return None
    return _parse_owner(value or "")


def _stored_conflict(stored: Path | str | None, owner: Path | str) -> str | None:
    """Why ``owner`` may not take an instance whose storage names ``stored`` (:func:`_stored_owner`)."""
    if not _another(stored, owner):
        return None
    return (f"the Dagster instance's storage, which all its hosts share, keeps the runs and document partitions of "
            f"{_shown(stored)}; it will not take {_shown(owner)} too (same-named documents would share a partition). "
            f"Give this lake its own Dagster database (or, if that lake is gone for good, delete the row with key "
            f"'{INSTANCE_KEY}' from the kvs table of the instance's database)")


def _store_owner(instance: "DagsterInstance", owner: Path | str) -> None:
    if instance.is_ephemeral:
        return
    try:
        instance.run_storage.set_cursor_values({INSTANCE_KEY: str(owner)})
    except Exception:  # noqa: BLE001 - as for a marker that cannot be written: nothing claimed
        pass


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


def _claimant(db_path: Path | str, lake: "LakeConfig | None") -> Path | str:
    """What a marker names: the database file's resolved path, or the lake (:func:`lake_owner`)."""
    return lake_owner(lake) if lake is not None else Path(db_path).resolve()


def lake_owner(lake: "LakeConfig") -> str:
    """A lake as a claim names it: ``ducklake`` and its data path (a local one resolved), tab-separated.

    Not its catalog string: the hosts of one cluster reach one catalog by different addresses (a
    socket on one, ``host=db`` on another), and each named it otherwise, so a lake refused itself
    (seen in tests/deploy). The data path is where the lake's files are, the same for every host
    (object storage), and two lakes never share one."""
    if "://" in lake.data_path:
        # One bucket and prefix however it is written: s3://b/lake, S3://b/lake and s3://b/lake/.
        scheme, rest = lake.data_path.split("://", 1)
        data = f"{scheme.lower()}://{rest.rstrip('/')}"
    else:
        data = str(Path(lake.data_path).resolve())
    return f"{LAKE_OWNER}\t{data}"


def _lake_data(owner: Path | str) -> str | None:
    """The data path a lake's name (:func:`lake_owner`) holds; None for a database file's path."""
    if isinstance(owner, str) and owner.startswith(f"{LAKE_OWNER}\t"):
        return owner.split("\t", 1)[1]
    return None


def _shown(owner: Path | str) -> str:
    """An owner for a message: a database's path, or ``the lake with data at <data path>``."""
    data = _lake_data(owner)
    return str(owner) if data is None else f"the lake with data at {data}"


def _exists(owner: Path | str) -> bool:
    """Whether a claim's owner is still there: its database file, or a lake's local data folder (one
    in object storage is taken to be: nothing here can tell)."""
    data = _lake_data(owner)
    if data is None:
        return Path(owner).exists()
    return "://" in data or Path(data).exists()


def _another(owner: Path | str | None, database: Path | str) -> bool:
    """Whether ``owner`` is a database (or lake) other than ``database`` that still exists."""
    if owner is None or owner == database or not _exists(owner):
        return False
    if isinstance(owner, str) or isinstance(database, str):  # a lake: told apart by what names it
        return True
    try:
        return not (database.exists() and owner.samefile(database))
    except OSError:
        return True


def _owner(marker: Path) -> Path | str | None:
    try:
        text = marker.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):  # none yet (or not a readable marker: written over below)
        return None
    return _parse_owner(text)


def _parse_owner(text: str) -> Path | str | None:
    """A claim's owner from what names it: a lake's name, or a database file's path."""
    text = text.strip()
    if _lake_data(text) is not None:
        return text
    return Path(text) if text else None


def _write_owner(marker: Path, database: Path | str) -> None:
    if _owner(marker) == database:
        return
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(marker, f"{database}\n")
    except OSError:
        # A folder this process may not write (a read-only DAGSTER_HOME mount): nothing is claimed,
        # and the check above still refused whatever another database had claimed there.
        pass
