"""The secondary tier itself, without vLLM's base class (``lmcache_resp.vllm`` adds it when vLLM
loads the class): what ``RespSecondaryTierManager`` does, testable without vLLM installed.

vLLM's ``TieringOffloadingManager`` keeps a CPU primary tier in a shared, pre-faulted mapping
and hands each secondary tier a 2-D memoryview of it, one page-aligned row per chunk. The tier
registers that mapping with our I/O engine once, as one region; a job is then one batch of
``(offset, length)`` ranges of it, computed with numpy from the job's chunk ids: a store is a
SET per row, sent from the row, a load a GET per row, received into the row, by our I/O
threads with the GIL released. Nothing is copied, and no Python runs per row on the data path.
Every method returns at once: jobs and EXISTS batches are submitted, and their completions
drained from our completion ring (``drain()``), never waited for, except in ``drain_jobs``
and ``shutdown``, which vLLM calls to wait.
"""

from __future__ import annotations

import logging
import select
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from lmcache_resp import _native, metrics
from lmcache_resp._front import EngineFront
from lmcache_resp._placement import log_placement
from lmcache_resp.errors import InvalidInputError, RespError
from lmcache_resp.settings import RespSettings
from lmcache_resp.vllm._lookups import Lookups
from lmcache_resp.vllm._metrics import TierMetrics, definitions
from lmcache_resp.vllm._namespace import namespace_of

__all__ = ["RespSecondaryTierImpl"]

logger = logging.getLogger("lmcache_resp")

#: How long past the settings' timeout ``drain_jobs`` waits before closing the engine (every
#: key completes within the timeout, so this is never reached unless the engine is broken).
_DRAIN_GRACE_S = 2.0
#: How often vLLM's get_stats may read our engine's counters (a snapshot per endpoint).
_ENGINE_STATS_EVERY_S = 1.0


@dataclass(slots=True)
class _Job:
    job: Any  # vLLM's TransferJob
    op: str  # "store" or "load"
    keys: list[Any]
    submitted: float


class RespSecondaryTierImpl(EngineFront[_native.Connector]):
    """A secondary tier of vLLM's ``TieringOffloadingSpec`` on Redis or Valkey; vLLM's
    ``SecondaryTierFactory`` builds it as ``RespSecondaryTierManager(offloading_spec,
    primary_kv_view, tier_type, backpressure_detector, **tier_json)``, where ``tier_json`` is
    the entry of ``secondary_tiers`` less ``type``, ``module_path`` and ``backpressure``:
    ``locality`` (vLLM's) and our settings (:meth:`RespSettings.from_vllm
    <lmcache_resp.settings.RespSettings.from_vllm>`).
    """

    #: vLLM's classes the tier builds results and metrics with (``_api.VllmApi``); set on the
    #: class ``lmcache_resp.vllm`` builds.
    _api: ClassVar[Any]
    #: Set by vLLM's base ``__init__`` (the type named in the tier's JSON).
    tier_type: str

    def __init__(
        self,
        offloading_spec: Any,
        primary_kv_view: memoryview,
        tier_type: str,
        backpressure_detector: Any = None,
        *,
        locality: str | None = None,
        **settings: Any,
    ) -> None:
        import numpy as np

        super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector)  # type: ignore[call-arg]
        api = self._api
        self.locality = _locality(api, locality)
        self._settings = RespSettings.from_vllm(settings)
        rows, row_bytes, stride = _row_shape(primary_kv_view)
        self._rows, self._row_bytes, self._stride = rows, row_bytes, stride
        namespace, identity = namespace_of(api.file_mapper, offloading_spec, row_bytes)
        self._prefix = f"vllm:{namespace}:".encode()
        self._native = _native.Connector(self._settings)
        try:
            # One region for the whole primary: vLLM's view is 2-D signed bytes (format 'b'),
            # whose rows cannot be sliced or written as bytes; its flat unsigned cast can.
            self._flat: memoryview | None = primary_kv_view.cast("B")
            self._region = self._native.register_region(self._flat)
        except BaseException:
            self._native.close()
            raise
        self._np = np
        self._jobs: dict[int, _Job] = {}
        self._exists_sent: dict[int, float] = {}
        self._finished: list[Any] = []
        self._lookups = Lookups()
        self._metrics = TierMetrics()
        self._engine_stats_at = 0.0
        metrics.track(self)
        log_placement(tier_type, self._native.placement)
        logger.info(
            "%s (%s): %d primary rows of %d bytes on %s, keys %s<OffloadKey hex> (model %s, dtype %s, tp %s); settings %s",
            tier_type, api.version, rows, row_bytes, self._native.endpoint, self._prefix.decode(),
            identity.get("model_name"), identity.get("dtype"), identity.get("tp_size"), self._settings.to_dict(),
        )
        logger.debug("%s: the namespace %s fingerprints %s", tier_type, namespace, identity)

    # -- vLLM's lookups: batched, pipelined EXISTS ---------------------------------------------

    def on_new_request(self, req_context: Any) -> Any:
        return self._api.request_context()

    def lookup(self, key: bytes, req_context: Any) -> Any:
        """HIT or MISS once our EXISTS has answered for ``key``; RETRY until then (the key is
        sent with the step's others at ``on_schedule_end``)."""
        results = self._api.lookup_result
        found = self._lookups.verdict(key, req_context.req_id)
        if found is None and self._lookups.in_flight(key):
            self._poll()
            found = self._lookups.verdict(key, req_context.req_id)
        if found is None:
            return results.RETRY
        return results.HIT if found else results.MISS

    def on_schedule_end(self, context: Any) -> None:
        """Sends the step's new lookups as one EXISTS batch."""
        self._poll()
        keys = self._lookups.take_queue()
        if not keys:
            return
        try:
            batch = self._native.submit_ranges("exists", 0, [key.hex() for key in keys], None, None, self._prefix)
        except RespError as exc:
            logger.warning("%s: EXISTS of %d key(s) could not be sent (%s: %s): misses", self.tier_type,
                           len(keys), type(exc).__name__, exc)
            self._lookups.failed_to_send(keys)
            self._metrics.count("lookup", 0, failed=len(keys))
            return
        self._lookups.sent(batch, keys)
        self._exists_sent[batch] = time.monotonic()

    def on_request_finished(self, req_context: Any) -> None:
        self._lookups.finished(req_context.req_id)

    # -- jobs ------------------------------------------------------------------------------------

    def submit_store(self, job_metadata: Any) -> None:
        """SETs each of the job's primary rows under its key, straight from the row."""
        self._submit("set", "store", job_metadata)

    def submit_load(self, job_metadata: Any) -> None:
        """GETs each of the job's keys straight into its primary row (a value of another
        length is a miss: the row is left as it was)."""
        self._submit("get", "load", job_metadata)

    def get_finished_jobs(self) -> Iterable[Any]:
        """The jobs whose batches completed since the last call (drained from our completion
        ring without waiting)."""
        self._poll()
        finished, self._finished = self._finished, []
        return finished

    def has_pending_work(self) -> bool:
        return bool(self._jobs) or self._lookups.busy

    def drain_jobs(self) -> None:
        """Waits until every job (and EXISTS batch) submitted has completed. Every key
        completes within the settings' ``timeout``; past that (a broken engine) the engine is
        closed, which completes or fails everything it holds, and what is left fails."""
        deadline = time.monotonic() + self._settings.timeout + _DRAIN_GRACE_S
        fd = self._native.event_fd()
        while self._jobs or self._exists_sent:
            self._poll()
            left = deadline - time.monotonic()
            if not (self._jobs or self._exists_sent):
                break
            if left <= 0:
                logger.error("%s: %d job(s) still in flight %.1f s past the timeout: closing the I/O engine",
                             self.tier_type, len(self._jobs), _DRAIN_GRACE_S)
                self._native.close()
                self._poll()
                self._fail_all("the I/O engine was closed by drain_jobs")
                break
            select.select([fd], [], [], min(left, 0.05))

    def shutdown(self) -> None:
        """Waits for the jobs in flight, closes the connections, lets go of the primary view (so
        that vLLM can unmap it); idempotent."""
        if self._flat is None:
            return
        try:
            if not self._native.closed:
                self.drain_jobs()
        finally:
            # Closing completes or fails whatever is left: no I/O thread touches the rows after.
            self._native.close()
            self._poll()
            try:
                self._native.unregister_region(self._region)
                self._flat.release()
            except (RespError, BufferError) as exc:
                logger.warning("%s: the primary view could not be let go of: %s: %s", self.tier_type,
                               type(exc).__name__, exc)
            self._flat = None

    def close(self) -> None:
        self.shutdown()

    # -- metrics -----------------------------------------------------------------------------------

    @classmethod
    def build_metric_definitions(cls, extra_config: dict[str, Any]) -> dict[str, Any]:
        return definitions(cls._api)

    def get_stats(self) -> Any:
        now = time.monotonic()
        engine = None
        if now - self._engine_stats_at >= _ENGINE_STATS_EVERY_S and not self._native.closed:
            self._engine_stats_at = now
            engine = self.stats()
        return self._metrics.take(self._api.stats, engine)

    @classmethod
    def config_info_keys(cls, tier_config: dict[str, Any]) -> tuple[str, ...]:
        return ("resp_endpoint",)

    def config_info(self) -> Mapping[str, str]:
        return {"resp_endpoint": self._native.endpoint}

    # -- facts -------------------------------------------------------------------------------------

    @property
    def settings(self) -> RespSettings:
        return self._settings

    @property
    def key_prefix(self) -> str:
        """``vllm:<namespace>:``, what every row's key starts with (after ``key_prefix@``)."""
        return self._prefix.decode()

    def key_of(self, key: bytes) -> str:
        """The server's name for the row of vLLM's ``OffloadKey`` ``key`` (less ``key_prefix@``)."""
        return self.key_prefix + key.hex()

    def __repr__(self) -> str:
        state = ", closed" if self._native.closed else ""
        return f"{type(self).__name__}({self._native.endpoint!r}, {self._rows} rows of {self._row_bytes} bytes{state})"

    # -- inside ------------------------------------------------------------------------------------

    def _submit(self, op: str, kind: str, job: Any) -> None:
        keys = list(job.keys)
        try:
            spans = self._spans(job.chunk_ids, len(keys))
            batch = self._native.submit_ranges(op, self._region, [key.hex() for key in keys], spans, None, self._prefix)
        except RespError as exc:
            # Never raise into vLLM's scheduler: the job fails, the rows stay as they were.
            logger.warning("%s: %s job %s of %d row(s) could not be submitted: %s: %s", self.tier_type, kind,
                           job.job_id, len(keys), type(exc).__name__, exc)
            self._metrics.count(kind, 0, failed=len(keys))
            self._finished.append(self._api.job_result(job_id=job.job_id, success=False))
            if kind == "load":
                self._lookups.load_failed(keys)
            return
        self._jobs[batch] = _Job(job, kind, keys, time.monotonic())

    def _spans(self, chunk_ids: Any, count: int) -> Any:
        """``(offset, length)`` of each chunk's row, as the uint64 pairs the engine reads."""
        np = self._np
        ids = np.asarray(chunk_ids, dtype=np.int64).reshape(-1)
        if len(ids) != count:
            raise InvalidInputError(f"the job has {count} keys but {len(ids)} chunk ids")
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self._rows):
            raise InvalidInputError(f"chunk ids must lie in [0, {self._rows}): got {int(ids.min())}..{int(ids.max())}")
        spans = np.empty((len(ids), 2), dtype=np.uint64)
        spans[:, 0] = ids * self._stride
        spans[:, 1] = self._row_bytes
        return spans

    def _poll(self) -> None:
        """Files every completed batch: jobs into ``_finished``, EXISTS answers into the
        lookups. Never waits."""
        if self._native.closed and not (self._jobs or self._exists_sent):
            return
        try:
            results = self._native.drain()
        except RespError as exc:
            logger.warning("%s: draining completions failed: %s: %s", self.tier_type, type(exc).__name__, exc)
            return
        now = time.monotonic()
        for result in results:
            sent = self._exists_sent.pop(result.id, None)
            if sent is not None:
                self._answered(result, now - sent)
                continue
            job = self._jobs.pop(result.id, None)
            if job is not None:
                self._finished.append(self._completed(job, result, now))

    def _answered(self, result: Any, seconds: float) -> None:
        found = result.hits
        if self._lookups.owns(result.id):
            self._lookups.answered(result.id, found)
        failed = len(result.failures)
        hits = sum(found)
        self._metrics.count("lookup", hits, missed=len(found) - hits - failed, failed=failed)
        self._metrics.observe("lookup", seconds)

    def _completed(self, job: _Job, result: Any, now: float) -> Any:
        """vLLM's ``JobResult`` of a completed batch: success when every row moved; for a
        load, the keys that arrived whole (their rows hold the stored bytes) otherwise."""
        np = self._np
        moved = np.asarray(result.hits, dtype=bool)
        count = int(moved.sum())
        failed = len(result.failures)
        seconds = now - job.submitted
        self._metrics.count(job.op, count, missed=len(job.keys) - count - failed, failed=failed)
        self._metrics.observe(job.op, seconds)
        success = count == len(job.keys)
        if failed:
            index, error = result.failures[0]
            logger.warning("%s: %d of %d row(s) of %s job %s failed, the first (%s) with %s: %s", self.tier_type,
                           failed, len(job.keys), job.op, job.job.job_id, self.key_of(job.keys[index]),
                           type(error).__name__, error)
        successful_keys = None
        if job.op == "store":
            self._lookups.stored(job.keys if success else [job.keys[i] for i in np.flatnonzero(moved)])
        elif not success:
            arrived = [job.keys[i] for i in np.flatnonzero(moved)]
            self._lookups.load_failed(job.keys[i] for i in np.flatnonzero(~moved))
            successful_keys = tuple(arrived) if arrived else None
        return self._api.job_result(
            job_id=job.job.job_id,
            success=success,
            successful_keys=successful_keys,
            transfer_time=seconds,
            transfer_bytes=count * self._row_bytes,
        )

    def _fail_all(self, why: str) -> None:
        for job in self._jobs.values():
            self._metrics.count(job.op, 0, failed=len(job.keys))
            self._finished.append(self._api.job_result(job_id=job.job.job_id, success=False))
            if job.op == "load":
                self._lookups.load_failed(job.keys)
            logger.warning("%s: %s job %s failed: %s", self.tier_type, job.op, job.job.job_id, why)
        self._jobs.clear()
        for batch in list(self._exists_sent):
            self._exists_sent.pop(batch)
            if self._lookups.owns(batch):
                self._lookups.abandoned(batch)


def _locality(api: Any, locality: str | None) -> Any:
    """vLLM's ``Locality`` of the tier's ``locality`` setting (``LOCAL``/``REMOTE``), or None."""
    if locality is None:
        return None
    try:
        return api.locality(str(locality).upper())
    except ValueError:
        raise InvalidInputError(f'locality must be "LOCAL" or "REMOTE", got {locality!r}') from None


def _row_shape(view: memoryview) -> tuple[int, int, int]:
    """``(rows, bytes per row, stride)`` of vLLM's primary view: 2-D, C-contiguous, one row
    per chunk."""
    if not isinstance(view, memoryview):
        raise InvalidInputError(f"primary_kv_view must be a memoryview, not {type(view).__name__}")
    if view.ndim != 2 or view.strides is None or view.shape is None:
        raise InvalidInputError(f"primary_kv_view must be 2-D (chunks x bytes), got {view.ndim} dimension(s)")
    if view.readonly:
        raise InvalidInputError("primary_kv_view is read-only: loads write into it")
    rows, width = view.shape
    row_bytes = width * view.itemsize
    stride = view.strides[0]
    if not view.c_contiguous or stride != row_bytes:
        raise InvalidInputError(
            f"primary_kv_view must be C-contiguous rows (stride {stride} for {row_bytes} bytes a row)"
        )
    if rows < 1 or row_bytes < 1:
        raise InvalidInputError(f"primary_kv_view holds {rows} row(s) of {row_bytes} bytes: nothing to offload")
    return rows, row_bytes, stride
