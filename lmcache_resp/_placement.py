"""Reporting where the I/O threads and the arena were placed."""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("lmcache_resp")


def log_placement(owner: str, placement: dict[str, Any]) -> None:
    """Logs the placement decision, one line per reason, at INFO."""
    for line in placement["explanation"]:
        logger.info("%s placement: %s", owner, line)
