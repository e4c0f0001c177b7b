"""The in-place key/value arena of the HF prefix path."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from capjudge.backends.hf.kv import KVArena  # noqa: E402

pytestmark = pytest.mark.hf


def _kv(n: int, seed: int, dtype=None):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, 2, n, 4, generator=g, dtype=dtype or torch.float32), torch.randn(1, 2, n, 4, generator=g, dtype=dtype or torch.float32)


def test_writes_append_in_place_and_views_hold_every_slot() -> None:
    arena = KVArena(2)
    cache = arena.cache(0)
    k1, v1 = _kv(3, 1)
    k2, v2 = _kv(5, 2)
    cache.update(k1, v1, 0)
    keys, values = cache.update(k2, v2, 0)
    assert torch.equal(keys, torch.cat([k1, k2], dim=2)) and torch.equal(values, torch.cat([v1, v2], dim=2))
    assert cache.get_seq_length(0) == 8
    cache.update(k1, v1, 1)
    assert arena.length == 3  # the least-filled layer


def test_truncation_keeps_the_start_and_growth_preserves_it() -> None:
    arena = KVArena(1)
    head_k, head_v = _kv(4, 1)
    arena.cache(0).update(head_k, head_v, 0)
    arena.cache(4).update(*_kv(2, 2), 0)  # written after the head, then dropped below
    for step in range(6):  # every write lands after the kept head, growing the buffer
        k, v = _kv(50 * (step + 1), 10 + step)
        keys, values = arena.cache(4).update(k, v, 0)
        assert keys.shape[2] == 4 + k.shape[2]
        assert torch.equal(keys[:, :, :4], head_k) and torch.equal(values[:, :, 4:], v)
    assert arena.cache(1000).get_seq_length(0) == 4 + 300  # truncating never extends past what is filled


def test_another_dtype_or_width_starts_over_and_release_frees() -> None:
    arena = KVArena(1)
    arena.cache(0).update(*_kv(4, 1), 0)
    k64, v64 = _kv(2, 2, torch.float64)
    keys, _ = arena.cache(4).update(k64, v64, 0)  # nothing kept is usable in another dtype
    assert keys.dtype == torch.float64 and keys.shape[2] == 2 and arena.length == 2
    arena.release()
    assert arena.length == 0 and arena.cache(5).get_seq_length(0) == 0


def test_trim_frees_buffers_grown_by_an_unusually_long_use() -> None:
    arena = KVArena(1)
    arena.cache(0).update(*_kv(3000, 1), 0)  # a long-answer call
    assert arena.capacity >= 3000 and not arena.trim()  # its own peak: kept
    assert not arena.trim()  # unused since: kept
    arena.cache(0).update(*_kv(700, 2), 0)  # a usual call needs far less
    assert arena.trim() and arena.capacity == 0
    arena.cache(0).update(*_kv(700, 3), 0)
    assert not arena.trim() and arena.capacity == 700  # steady state: kept
