"""Celery settings of chunkyard's workers: ``dagster_celery.app`` imports this module by name.

A worker is started with deploy/ on PYTHONPATH (deploy/README.md, deploy/local_cluster.py)
so that ``celery -A dagster_celery.app worker`` reads the same broker and result backend as
the runs, which take them from the same environment variables (orchestration/definitions.py).
"""

import os

broker_url = os.environ["CHUNKYARD_CELERY_BROKER"]
result_backend = os.environ["CHUNKYARD_CELERY_BACKEND"]
# One step at a time per worker process: a step embeds a whole range of documents, so a
# prefetched second task would only wait behind it while another worker sits idle.
worker_prefetch_multiplier = 1
