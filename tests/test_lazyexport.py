"""capjudge.core.lazyexport: lazy package names and moved names (one DeprecationWarning, the new path named)."""

from __future__ import annotations

import sys
import types
import warnings
from collections.abc import Iterator

import pytest

from capjudge.core.lazyexport import lazy_attributes, moved_names


@pytest.fixture
def module() -> Iterator[types.ModuleType]:
    mod = types.ModuleType("capjudge_lazyexport_probe")
    sys.modules[mod.__name__] = mod
    yield mod
    del sys.modules[mod.__name__]


def test_lazy_names_are_imported_when_used_and_kept(module: types.ModuleType) -> None:
    getattr_, dir_ = lazy_attributes(module.__name__, {"EXIT_USAGE": "capjudge.core.errors", "Usage": "capjudge.core.errors:UsageError"})
    module.__getattr__ = getattr_  # type: ignore[method-assign]
    assert "EXIT_USAGE" in dir_() and "Usage" in dir_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert module.EXIT_USAGE == 2
        from capjudge.core.errors import UsageError

        assert module.Usage is UsageError
    assert "EXIT_USAGE" in vars(module)  # later look-ups skip __getattr__
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        module.nothing  # noqa: B018


def test_a_moved_name_warns_once_and_names_the_new_path(module: types.ModuleType) -> None:
    module.__getattr__ = moved_names(module.__name__, {"_old": "capjudge.core.errors:EXIT_USAGE"})  # type: ignore[method-assign]
    with pytest.warns(DeprecationWarning, match=r"capjudge_lazyexport_probe\._old has moved: import EXIT_USAGE from capjudge\.core\.errors"):
        assert module._old == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert module._old == 2  # warned once


def test_every_lazy_package_uses_the_helper() -> None:
    import capjudge
    import capjudge.arena
    import capjudge.distributed
    import capjudge.metaeval
    import capjudge.parity
    import capjudge.report

    for pkg in (capjudge, capjudge.arena, capjudge.distributed, capjudge.metaeval, capjudge.parity, capjudge.report):
        assert pkg.__getattr__.__module__ == "capjudge.core.lazyexport", pkg.__name__
