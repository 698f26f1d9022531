"""A lake on object storage: ``[store] data_path = "s3://..."`` against a real S3-compatible server
(moto's, started from the package: tests/store/conftest.py), with its catalog in PostgreSQL.

Settings and their errors; the secret the store makes from the environment; writes landing as
Parquet files in the bucket and read back by another process; a wrong endpoint, bucket or key
refused at connection with a message naming the setting, nothing written anywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chunking.model import Chunk, Page, ParsedDocument
from orchestration.settings import Settings, load_settings
from resources.store import (
    ChunkStore,
    LakeConfig,
    ObjectStoreError,
    S3Options,
    StoreResource,
    object_store_message,
    s3_options,
    s3_secret_sql,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
ROOT = "/docs"


# -- settings ------------------------------------------------------------------------------


def lake_settings(**store) -> Settings:
    return Settings(store={"mode": "ducklake", "catalog": "postgres:dbname=x", **store})


def test_s3_settings_reach_the_lake_config_and_the_resource(tmp_path, monkeypatch):
    config = tmp_path / "chunkyard.toml"
    config.write_text('[store]\nmode = "ducklake"\ncatalog = "postgres:dbname=c host=db"\n'
                      'data_path = "s3://bucket/lake"\ns3_endpoint = "http://minio.local:9000"\n'
                      's3_region = "eu-west-3"\n')
    for variable in ("CHUNKYARD_STORE_MODE", "CHUNKYARD_STORE_CATALOG", "CHUNKYARD_STORE_DATA_PATH",
                     "CHUNKYARD_STORE_S3_ENDPOINT", "CHUNKYARD_STORE_S3_URL_STYLE", "CHUNKYARD_STORE_S3_USE_SSL",
                     "CHUNKYARD_STORE_S3_REGION"):
        monkeypatch.delenv(variable, raising=False)
    lake = load_settings(config).store.lake()
    # The scheme decides use_ssl, and an endpoint without url_style means path-style URLs.
    assert lake.s3 == S3Options(endpoint="minio.local:9000", url_style="path", use_ssl=False, region="eu-west-3")
    assert lake.extensions() == ("ducklake", "postgres_scanner", "httpfs")
    assert "minio.local:9000" in lake.describe()
    # Subprocesses rebuild a lake from its repr; a folder lake's names no S3Options.
    assert eval(repr(lake), {"LakeConfig": LakeConfig, "S3Options": S3Options}) == lake
    assert repr(LakeConfig("sqlite:m", "/d")) == "LakeConfig(catalog='sqlite:m', data_path='/d')"

    monkeypatch.setenv("CHUNKYARD_STORE_S3_ENDPOINT", "s3.example.com")
    monkeypatch.setenv("CHUNKYARD_STORE_S3_URL_STYLE", "vhost")
    monkeypatch.setenv("CHUNKYARD_STORE_S3_USE_SSL", "true")
    settings = load_settings(config)
    assert settings.store.lake().s3 == S3Options(endpoint="s3.example.com", url_style="vhost", use_ssl=True,
                                                 region="eu-west-3")
    resource = StoreResource(path=str(tmp_path / "x.duckdb"), **settings.store.model_dump())
    assert resource.store().lake == settings.store.lake()
    # No credential is a setting: they would end up in the file, or in Dagster's run config.
    assert not any("key" in name or "secret" in name for name in settings.store.model_dump())


@pytest.mark.parametrize(("store", "message"), [
    ({"data_path": "s3://b/l", "s3_url_style": "virtual"}, r"s3_url_style = 'virtual': expected 'path' or 'vhost'"),
    ({"data_path": "s3://b/l", "s3_endpoint": "ftp://h:1"}, r"s3_endpoint = 'ftp://h:1': the scheme must be"),
    ({"data_path": "s3://b/l", "s3_endpoint": "http://h:9000/bucket"}, r"s3_endpoint = .*without a path"),
    ({"data_path": "s3://b/l", "s3_endpoint": "https://h", "s3_use_ssl": False},
     r"s3_endpoint = 'https://h' and s3_use_ssl = false disagree"),
    ({"data_path": "s3://b/l", "s3_region": " "}, r"s3_region is empty"),
    ({"data_path": "/srv/lake", "s3_endpoint": "h:1"}, r"s3_endpoint is set but data_path = '/srv/lake'"),
    ({"data_path": "s3:///lake"}, r"data_path = 's3:///lake': expected s3://<bucket>/<prefix>"),
    ({"data_path": "s3://b/l", "s3_use_ssl": "maybe"}, r"store.s3_use_ssl"),
])
def test_a_bad_s3_setting_fails_at_load_naming_its_key(store, message):
    with pytest.raises(ValueError, match=message):
        lake_settings(**store)


# -- the secret --------------------------------------------------------------------------


def test_the_secret_takes_credentials_from_the_environment_only():
    options = s3_options("s3://b/lake", "http://127.0.0.1:9000")
    env = {"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": "it's", "AWS_DEFAULT_REGION": "eu-north-1"}
    sql = s3_secret_sql("s3://b/lake", options, env)
    assert sql == ("CREATE OR REPLACE TEMPORARY SECRET chunkyard_lake (TYPE s3, KEY_ID 'AKIA1', SECRET 'it''s', "
                   "REGION 'eu-north-1', ENDPOINT '127.0.0.1:9000', URL_STYLE 'path', USE_SSL false, "
                   "SCOPE 's3://b/lake')")
    # s3_region wins over the environment's; a session token is passed on.
    with_token = s3_secret_sql("s3://b/lake", S3Options(region="us-west-2"),
                               {**env, "AWS_SESSION_TOKEN": "tok", "AWS_REGION": "ap-south-1"})
    assert "SESSION_TOKEN 'tok'" in with_token and "REGION 'us-west-2'" in with_token
    assert "ENDPOINT" not in with_token and "USE_SSL" not in with_token  # DuckDB's defaults: AWS, https
    # Nothing to say: no secret of ours, DuckDB's own (a persistent secret) or anonymous access apply.
    assert s3_secret_sql("s3://b/lake", S3Options(), {}) is None
    with pytest.raises(ObjectStoreError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: set both or neither"):
        s3_secret_sql("s3://b/lake", options, {"AWS_ACCESS_KEY_ID": "AKIA1"})


def test_object_store_errors_name_the_setting_to_fix():
    options = S3Options(endpoint="127.0.0.1:1", url_style="path", use_ssl=False)
    refused = object_store_message("s3://b/l", options, "IO Error: Could not connect to server error for HTTP GET")
    assert "s3_endpoint = '127.0.0.1:1'" in refused and "unreachable" in refused
    forbidden = object_store_message("s3://b/l", options, "HTTP 403 Forbidden\n\nSignatureDoesNotMatch: ...")
    assert "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY" in forbidden
    missing = object_store_message("s3://gone/l", options, "HTTP GET error ... (HTTP 404 Not Found)")
    assert "bucket 'gone' does not exist" in missing and "data_path" in missing
    # A port or a name containing 403 / 404 is no status code.
    port = S3Options(endpoint="127.0.0.1:4031", url_style="path", use_ssl=False)
    unreachable = object_store_message("s3://b404/l", port, "Could not connect to server error for HTTP GET to "
                                       "'http://127.0.0.1:4031/b404/?list-type=2'")
    assert "unreachable at s3_endpoint = '127.0.0.1:4031'" in unreachable


# -- against the S3 server -----------------------------------------------------------------


def put_document(store: ChunkStore, doc_id: str, text: str) -> None:
    store.record_read(doc_id, ROOT, doc_id, f"sha-{doc_id}", len(text))
    store.replace_parsed(ParsedDocument(doc_id=doc_id, source_name=doc_id, format="txt", text=text,
                                        pages=[Page(page_num=0, char_offset=0, text=text)], sha256=f"sha-{doc_id}"),
                         ROOT, doc_id, len(text))
    words = text.split()
    chunks = [Chunk(text=" ".join(words[i:i + 4]), token_count=4, char_start=0, char_end=1)
              for i in range(0, len(words), 4)]
    store.replace_chunks(doc_id, "recursive", chunks, config_hash="cfg", doc_sha256=f"sha-{doc_id}")


READER = """
    import json, sys
    from resources.store import ChunkStore, LakeConfig, S3Options
    lake = LakeConfig(catalog={catalog!r}, data_path={data_path!r}, s3=S3Options(**{s3!r}))
    with ChunkStore("unused.duckdb", lake=lake).snapshot() as con:
        rows = con.execute("SELECT doc_id, chunk_index, text FROM chunks ORDER BY ALL").fetchall()
        pages = con.execute("SELECT doc_id, text FROM pages ORDER BY ALL").fetchall()
    print(json.dumps({{"chunks": rows, "pages": pages}}))
"""


def read_in_another_process(lake: LakeConfig) -> dict:
    code = textwrap.dedent(READER).format(catalog=lake.catalog, data_path=lake.data_path, s3=vars(lake.s3))
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_a_lake_on_s3_writes_parquet_to_the_bucket_and_another_process_reads_it(s3_lake, s3_server, tmp_path):
    store = ChunkStore(tmp_path / "unused.duckdb", lake=s3_lake)
    # 60 words: 15 chunks in one insert, over DuckLake's inlining limit (smaller inserts stay in
    # the catalog's own tables, not in files).
    long_text = " ".join(f"w{i}" for i in range(60))
    put_document(store, "a.txt", "one two three four five six seven eight nine")
    put_document(store, "b.txt", long_text)
    put_document(store, "a.txt", "rewritten one two three four five")  # a replace: delete + insert

    prefix = s3_lake.data_path.removeprefix(f"s3://{s3_server.bucket}/")
    keys = s3_server.keys(prefix + "/")
    assert any(key.startswith(f"{prefix}/main/chunks/") and key.endswith(".parquet") for key in keys), keys

    seen = read_in_another_process(s3_lake)
    assert seen["pages"] == [["a.txt", "rewritten one two three four five"], ["b.txt", long_text]]
    expected = [["a.txt", 0, "rewritten one two three"], ["a.txt", 1, "four five"]] + [
        ["b.txt", i, " ".join(f"w{j}" for j in range(4 * i, 4 * i + 4))] for i in range(15)]
    assert sorted(seen["chunks"]) == sorted(expected)
    with store.snapshot() as con:  # this process reads the same rows
        assert con.execute("SELECT doc_id, chunk_index, text FROM chunks ORDER BY ALL").fetchall() == \
            [tuple(row) for row in seen["chunks"]]


def catalog_tables(postgres, lake: LakeConfig) -> str:
    database = lake.catalog.split("dbname=")[1].split()[0]
    return postgres.server.psql(f"\\c {database}\nSELECT count(*) AS tables FROM pg_tables "
                                "WHERE schemaname NOT IN ('pg_catalog', 'information_schema');")


@pytest.mark.parametrize(("broken", "message"), [
    ("endpoint", r"unreachable at s3_endpoint = '127\.0\.0\.1:1': check \[store\] s3_endpoint and s3_use_ssl"),
    ("secret", r"credentials were refused: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"),
    ("key", r"credentials were refused: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY"),
    ("bucket", r"bucket 'no-such-bucket' does not exist at s3_endpoint .*: check \[store\] data_path"),
])
def test_a_wrong_endpoint_key_or_bucket_fails_at_connection_naming_it_and_writes_nothing(
        broken, message, s3_lake, s3_server, postgres, monkeypatch, tmp_path):
    lake = s3_lake
    if broken == "endpoint":
        lake = LakeConfig(lake.catalog, lake.data_path, s3_options(lake.data_path, "http://127.0.0.1:1"))
    elif broken == "secret":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    elif broken == "key":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY0000000")
    else:
        path = lake.data_path.replace(f"s3://{s3_server.bucket}/", "s3://no-such-bucket/")
        lake = LakeConfig(lake.catalog, path, lake.s3)
    store = ChunkStore(tmp_path / "unused.duckdb", lake=lake)
    with pytest.raises(ObjectStoreError, match=message) as raised:
        put_document(store, "a.txt", "never stored")
    assert lake.data_path in str(raised.value)
    # Refused before the catalog was attached: no table in its database, no file in the bucket.
    assert "\n      0\n" in catalog_tables(postgres, lake), catalog_tables(postgres, lake)
    assert s3_server.keys(lake.data_path.split("/", 3)[3]) == []

    # The same lake with the right settings then works from scratch.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_access_key)
    fixed = ChunkStore(tmp_path / "unused.duckdb", lake=s3_lake)
    put_document(fixed, "a.txt", "stored now")
    with fixed.snapshot() as con:
        assert con.execute("SELECT doc_id, text FROM pages").fetchall() == [("a.txt", "stored now")]
