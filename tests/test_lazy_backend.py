"""Lazy backend start: a run whose every request is a cache hit never loads the model."""

from __future__ import annotations

from pathlib import Path

import pytest

from capjudge import Judge, Sample
from capjudge.backends.base import Backend
from capjudge.backends.lazy import BackendLoadError, LazyBackend
from capjudge.backends.scripted import ScriptedBackend

EX = Path(__file__).resolve().parents[1] / "examples" / "images"
CATS, DOG = EX / "cats.jpg", EX / "dog.jpg"
SAMPLES = [Sample(CATS, "two cats"), Sample(DOG, "a dog"), Sample(CATS, "a cat on a bed")]


def lazy_scripted(loads: list[int], answer: str = "0.8") -> LazyBackend:
    """A scripted backend behind a LazyBackend whose load is counted."""

    def build() -> Backend:
        loads.append(1)
        backend = ScriptedBackend(answer, model="counted")
        backend.spec = "scripted:counted"
        return backend

    probe = ScriptedBackend(answer, model="counted")
    return LazyBackend(build, kind="scripted", spec="scripted:counted", model="counted", identity=probe.identity())


def test_a_run_answered_by_the_cache_never_loads(tmp_path: Path) -> None:
    loads: list[int] = []
    first = list(Judge("visce2", lazy_scripted(loads), cache_dir=tmp_path).score_many(SAMPLES))
    assert loads == [1] and all(r.ok or "no score" in (r.error or "") for r in first)
    judge = Judge("visce2", lazy_scripted(loads), cache_dir=tmp_path)
    again = list(judge.score_many(SAMPLES))
    assert loads == [1]  # every request (both steps) came from the cache
    assert [r.to_dict()["raw"] for r in again] == [r.to_dict()["raw"] for r in first]
    assert judge.backend.inner.loads == 0 and not judge.backend.inner.loaded  # type: ignore[attr-defined]
    # A new caption misses the cache: now the model loads, once.
    list(judge.score_many([Sample(DOG, "a black dog")]))
    assert loads == [1, 1] and judge.backend.inner.loads == 1  # type: ignore[attr-defined]


def test_an_attribute_lookup_does_not_load_and_a_failed_load_stops_the_run() -> None:
    loads: list[int] = []
    lazy = lazy_scripted(loads)
    assert getattr(lazy, "usage", None) is None and loads == []

    def broken() -> Backend:
        raise OSError("weights file truncated")

    bad = LazyBackend(broken, kind="scripted", spec="scripted:broken", model="broken", identity={"kind": "scripted"})
    with pytest.raises(BackendLoadError, match="weights file truncated"):
        list(Judge("vanilla", bad).score_many(SAMPLES))
    with pytest.raises(BackendLoadError):
        bad.load()  # the failure is remembered, not retried per request


def test_cli_exits_1_when_the_model_cannot_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import capjudge.backends.registry as registry
    from capjudge.cli import main

    def factory(spec: object, **options: object) -> Backend:
        raise AssertionError("not used: the lazy factory is")

    def lazy_factory(spec: object, **options: object) -> Backend:
        def broken() -> Backend:
            raise OSError("CUDA out of memory")

        return LazyBackend(broken, kind="fake", spec="fake:model", model="model", identity={"kind": "fake"})

    module = type("M", (), {"from_spec": staticmethod(factory), "lazy_from_spec": staticmethod(lazy_factory)})
    monkeypatch.setitem(registry._REGISTRY, "fake", "fake_backend_module:from_spec")
    monkeypatch.setitem(__import__("sys").modules, "fake_backend_module", module)
    out = tmp_path / "o.jsonl"
    rc = main(["score", "--method", "vanilla", "--backend", "fake:model", "--images", str(EX), "--input", str(EX.parent / "captions.jsonl"), "--out", str(out), "--no-cache", "--quiet"])
    assert rc == 1 and "CUDA out of memory" in capsys.readouterr().err


@pytest.mark.hf
def test_tiny_hf_model_loads_only_on_a_cache_miss(tiny_llava_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from capjudge.backends import hf

    built: list[hf.HFBackend] = []
    real_init = hf.HFBackend.__init__

    def counting(self: hf.HFBackend, *args: object, **kwargs: object) -> None:
        real_init(self, *args, **kwargs)  # type: ignore[arg-type]
        built.append(self)

    monkeypatch.setattr(hf.HFBackend, "__init__", counting)
    spec = f"hf:{tiny_llava_dir}"
    judge = Judge("fleur", spec, cache_dir=tmp_path)
    lazy = judge.backend.inner  # type: ignore[attr-defined]
    assert isinstance(lazy, LazyBackend) and built == []  # made, not loaded
    first = list(judge.score_many(SAMPLES[:2]))
    assert len(built) == 1 and all(r.ok for r in first), [r.error for r in first]
    assert lazy.identity() == built[0].identity()  # the cache keys do not depend on loading
    judge.close()
    again = list(Judge("fleur", spec, cache_dir=tmp_path).score_many(SAMPLES[:2]))
    assert len(built) == 1 and all(r.details["cached"] for r in again)
    assert [r.score for r in again] == [r.score for r in first]
