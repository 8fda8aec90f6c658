"""A class of ours under an engine's base class, built the first time the engine asks for it.

LMCache, SGLang and vLLM each load an out-of-tree class by module path and name, and check that
it subclasses a base class of theirs. That base lives in the engine, and this package must
import without any engine installed. So an adapter keeps its implementation as a plain class
(testable alone) and declares a :class:`LazySubclass`: the class the engine sees is
``class Name(Impl, EngineBase)``, made once, under a lock, when the engine first looks the name
up in the adapter's module (PEP 562's module ``__getattr__``, which :func:`module_getattr`
writes). The implementation comes first in the MRO, so its methods win and its ``super()``
calls reach the engine's base.
"""

from __future__ import annotations

import importlib
import threading
import types
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["LazySubclass", "import_attribute", "module_getattr"]


def import_attribute(module: str, name: str) -> Callable[[], Any]:
    """A loader of ``module.name`` that imports ``module`` only when called."""
    return lambda: getattr(importlib.import_module(module), name)


class LazySubclass:
    """``name``: ``impl`` under the engine's base class (``base()``), in module ``module``.

    ``namespace``, when given, is called once at the build and its entries become class
    attributes (values the engine's base reads as the class is created, such as vLLM's
    ``medium``, or the engine's own types the implementation uses).
    """

    def __init__(
        self,
        name: str,
        impl: type,
        module: str,
        base: Callable[[], type],
        namespace: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self.name, self.impl, self.module = name, impl, module
        self._base, self._namespace = base, namespace
        self._lock = threading.Lock()
        self._built: type | None = None

    def get(self) -> type:
        """The class, built (and the engine's base imported) on the first call."""
        with self._lock:
            if self._built is None:
                self._built = self.build(self._base(), dict(self._namespace() if self._namespace else {}))
            return self._built

    def build(self, base: type, extra: Mapping[str, Any] | None = None) -> type:
        """``class name(impl, base)`` with ``extra`` as class attributes, not remembered: what
        :meth:`get` builds once, and what a test builds over a stand-in for the engine's base."""
        namespace = {"__module__": self.module, "__qualname__": self.name, "__doc__": self.impl.__doc__, **(extra or {})}
        return types.new_class(self.name, (self.impl, base), {}, lambda ns: ns.update(namespace))


def module_getattr(module: str, *classes: LazySubclass) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) that answers each of ``classes`` by its name: what
    the engines' loaders do is ``getattr(importlib.import_module(path), name)``."""
    by_name = {lazy.name: lazy for lazy in classes}

    def __getattr__(name: str) -> Any:
        lazy = by_name.get(name)
        if lazy is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return lazy.get()

    return __getattr__
