"""``with`` and ``async with`` for everything that has a ``close()``."""

from __future__ import annotations

from types import TracebackType
from typing import TypeVar

# typing.Self is 3.11+; the package supports 3.10 (as LMCache does).
_C = TypeVar("_C", bound="Closeable")


class Closeable:
    __slots__ = ()
    """Closes on leaving a ``with`` or ``async with`` block, errors or not."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self: _C) -> _C:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
