"""Reporting where the I/O threads and the arena were placed."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("lmcache_resp")


def log_placement(owner: str, placement: dict[str, Any]) -> None:
    """Logs the placement decision, one line per reason, and the I/O loop the workers run
    (where they run in this process), at INFO."""
    for line in placement["explanation"]:
        logger.info("%s placement: %s", owner, line)
    io_loop = placement.get("io_loop")
    if io_loop is not None:
        logger.info("%s I/O loop: %s (%s)", owner, io_loop["loop"], io_loop["why"])
