"""The tier's answers to vLLM's lookups, from batched EXISTS: never a blocking call.

vLLM asks ``lookup(key)`` per chunk, under its manager's lock, many times per step, and keeps
scanning a request's chunks past a RETRY so that a tier can start every probe at once. A key
seen for the first time is queued and answered RETRY; ``flush`` (at the end of each step) sends
the step's queue as one pipelined EXISTS batch; its answer, drained from our completion ring,
becomes the key's verdict (HIT or MISS), which stays while a request still asks about it.
A failed EXISTS (the server down) is a MISS: vLLM recomputes rather than waits.

The same rules as vLLM's own async lookup (``tiering/async_lookup.py``): a verdict belongs to
the requests that asked (freed with the last of them, kept while its probe is in flight); a
store we completed makes a key present at once and overrides a probe still in flight (its
answer predates the store); a failed load turns a HIT into a MISS so that vLLM stops promoting
a row that is gone, but leaves a newer probe alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["Lookups"]


@dataclass(slots=True)
class _Probe:
    #: None until answered; True: the key exists; False: it does not (or its load failed).
    found: bool | None = None
    #: The EXISTS batch in flight for it (its answer applies only to this probe), or None.
    batch: int | None = None
    requests: set[str] = field(default_factory=set)


class Lookups:
    """Per-key verdicts; the owner sends :meth:`take_queue`'s keys as one EXISTS batch and
    hands the answer to :meth:`answered`."""

    def __init__(self) -> None:
        self._probes: dict[bytes, _Probe] = {}
        self._by_request: dict[str, set[bytes]] = {}
        self._queue: list[bytes] = []
        self._in_flight: dict[int, list[bytes]] = {}

    def verdict(self, key: bytes, request: str) -> bool | None:
        """The key's verdict for ``request``, or None (queued for the next EXISTS batch, or
        in flight)."""
        probe = self._probes.get(key)
        if probe is None:
            probe = self._probes[key] = _Probe()
            self._queue.append(key)
        probe.requests.add(request)
        self._by_request.setdefault(request, set()).add(key)
        return probe.found

    def in_flight(self, key: bytes) -> bool:
        """Whether an EXISTS for ``key`` was sent and not answered."""
        probe = self._probes.get(key)
        return probe is not None and probe.batch is not None

    def take_queue(self) -> list[bytes]:
        """The keys queued since the last call, in the order asked."""
        queue, self._queue = self._queue, []
        # A key freed and asked again is queued twice; one answered by a store needs no probe.
        return [key for key in dict.fromkeys(queue) if (p := self._probes.get(key)) is not None and p.found is None and p.batch is None]

    def sent(self, batch: int, keys: list[bytes]) -> None:
        """``keys`` (from :meth:`take_queue`) went out as EXISTS batch ``batch``."""
        self._in_flight[batch] = keys
        for key in keys:
            self._probes[key].batch = batch

    def failed_to_send(self, keys: Sequence[bytes]) -> None:
        """The batch could not be submitted: the keys are misses, as a failed EXISTS is."""
        self._settle(None, keys, [False] * len(keys))

    def owns(self, batch: int) -> bool:
        return batch in self._in_flight

    def answered(self, batch: int, found: Sequence[bool]) -> None:
        """EXISTS batch ``batch`` came back: ``found`` per key, in the order sent."""
        self._settle(batch, self._in_flight.pop(batch), found)

    def abandoned(self, batch: int) -> None:
        """EXISTS batch ``batch`` will never answer (the engine was closed): misses."""
        keys = self._in_flight.pop(batch)
        self._settle(batch, keys, [False] * len(keys))

    def _settle(self, batch: int | None, keys: Sequence[bytes], found: Sequence[bool]) -> None:
        for key, hit in zip(keys, found):
            probe = self._probes.get(key)
            if probe is None or probe.batch != batch:
                continue  # superseded: a store completed meanwhile, or the key was freed
            probe.batch = None
            if not probe.requests:
                del self._probes[key]
            else:
                probe.found = bool(hit)

    def stored(self, keys: Iterable[bytes]) -> None:
        """Our store of ``keys`` completed: each is present, whatever a probe in flight says."""
        for key in keys:
            probe = self._probes.get(key)
            if probe is None:
                continue
            if not probe.requests and probe.batch is not None:
                del self._probes[key]
                continue
            probe.found, probe.batch = True, None

    def load_failed(self, keys: Iterable[bytes]) -> None:
        """A load of ``keys`` failed: an answered HIT becomes a MISS (a newer probe decides)."""
        for key in keys:
            probe = self._probes.get(key)
            if probe is not None and probe.batch is None and probe.found is not None:
                probe.found = False

    def finished(self, request: str) -> None:
        """``request`` will ask no more: its verdicts go, except those still in flight."""
        for key in self._by_request.pop(request, ()):
            probe = self._probes.get(key)
            if probe is None:
                continue
            probe.requests.discard(request)
            if not probe.requests and probe.batch is None:
                del self._probes[key]

    @property
    def busy(self) -> bool:
        """Keys queued or in flight: the engine should keep stepping so they get answered."""
        return bool(self._queue) or bool(self._in_flight)

    def __len__(self) -> int:
        return len(self._probes)
