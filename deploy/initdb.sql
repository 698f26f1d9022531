-- PAPER (docker-compose.yml): the databases besides Dagster's. Untested here.
CREATE DATABASE celery;
CREATE DATABASE chunkyard;
