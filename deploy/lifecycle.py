"""The one context-manager shape of deploy/'s services (a cluster, its network, its S3 server)."""

from __future__ import annotations


class StartStop:
    """``with Service(...) as service:`` starts it and always stops it.

    Invariant a subclass relies on: ``stop()`` runs even when ``start()`` fails halfway, so
    ``stop()`` must undo whatever part of ``start()`` happened (and nothing else).
    """

    def start(self):
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc) -> None:
        self.stop()
