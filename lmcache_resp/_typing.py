"""Typing helpers shared by the package (import under TYPE_CHECKING only)."""

import sys

if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer

__all__ = ["Buffer"]
