"""Key names under one unique prefix per run, and deleting every one written, whatever happens.

A user's server is never flushed: each client registers its key names here before it writes
them, and the run's ``finally`` deletes them all (DEL of a key that is gone is harmless).
"""

from __future__ import annotations

import uuid

from lmcache_resp.client import RedisClient
from lmcache_resp.bench.target import Target

__all__ = ["KeyLedger", "new_prefix"]


def new_prefix() -> str:
    return f"lmcache-resp-bench:{uuid.uuid4()}:"


class KeyLedger:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._keys: dict[str, None] = {}  # an ordered set

    def keys(self, owner: str, count: int) -> list[str]:
        """``count`` key names for ``owner``, registered for deletion before anything is written."""
        names = [f"{self.prefix}{owner}:{i}" for i in range(count)]
        self._keys.update(dict.fromkeys(names))
        return names

    def key(self, name: str) -> str:
        full = f"{self.prefix}{name}"
        self._keys[full] = None
        return full

    def __len__(self) -> int:
        return len(self._keys)

    def delete_all(self, target: Target) -> None:
        """Deletes every registered key through a fresh connection (the run's own clients may be
        broken by whatever ended it)."""
        if not self._keys:
            return
        with RedisClient(**target.connect_kwargs()) as client:
            for key in self._keys:
                client.delete(key)
        self._keys.clear()
