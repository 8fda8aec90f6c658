"""``lmcache_resp._lazy_base``: an adapter's class under its engine's base class, built once, on
first use, by the three adapters (LMCache's non-MP plugin, SGLang's backend, vLLM's tier)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import lmcache_resp.lmcache.non_mp
import lmcache_resp.sglang
import lmcache_resp.vllm
from lmcache_resp._lazy_base import LazySubclass, import_attribute, module_getattr


class Impl:
    """What the engine gets."""

    def hello(self) -> str:
        return "impl"


class EngineBase:
    created: list[str] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        EngineBase.created.append(f"{cls.__name__}:{getattr(cls, 'medium', None)}")

    def hello(self) -> str:
        return "base"


def test_the_class_is_built_once_with_the_impl_first_and_its_names() -> None:
    loads: list[int] = []

    def base() -> type:
        loads.append(1)
        return EngineBase

    lazy = LazySubclass("Adapter", Impl, "some.module", base, namespace=lambda: {"medium": "disk"})
    assert loads == [], "nothing imported before the first use"
    built: list[type] = []
    threads = [threading.Thread(target=lambda: built.append(lazy.get())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == [1] and len({id(c) for c in built}) == 1, "built once, under a lock"
    cls = built[0]
    assert cls.__mro__[1:3] == (Impl, EngineBase) and cls().hello() == "impl"
    assert (cls.__name__, cls.__qualname__, cls.__module__, cls.__doc__) == ("Adapter", "Adapter", "some.module", Impl.__doc__)
    assert "Adapter:disk" in EngineBase.created, "the namespace is there when the engine's base sees the class"
    assert lazy.build(EngineBase) is not cls, "build() makes a new class each call (for stand-ins)"


def test_module_getattr_answers_only_the_classes_named() -> None:
    lazy = LazySubclass("Adapter", Impl, "m", import_attribute("collections", "OrderedDict"))
    getter = module_getattr("m", lazy)
    assert issubclass(getter("Adapter"), Impl)
    with pytest.raises(AttributeError, match="module 'm' has no attribute 'Other'"):
        getter("Other")


@pytest.mark.parametrize(
    ("module", "name", "engine"),
    [
        (lmcache_resp.lmcache.non_mp, "RespRemoteConnector", "lmcache"),
        (lmcache_resp.sglang, "RespHiCacheStorage", "sglang"),
        (lmcache_resp.vllm, "RespSecondaryTierManager", "vllm"),
    ],
)
def test_each_adapter_imports_its_engine_only_when_asked(module: Any, name: str, engine: str) -> None:
    with pytest.raises(ModuleNotFoundError, match=engine):
        getattr(module, name)
    with pytest.raises(AttributeError):
        module.NotAClass  # noqa: B018
