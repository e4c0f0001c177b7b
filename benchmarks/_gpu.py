"""Memory bandwidth and the bytes a decoding step reads: the bandwidth floors of ``bench_long.py``
and ``bench_judge.py``.

A decoding step (one new token for each of B rows) is bound by memory, not compute, on a GPU: it
reads every weight of the language model once, whatever B (the output head included; the input
embedding only one row per sequence, so it is not counted), plus the keys and values of every
row's context. Its floor is those bytes over the card's memory bandwidth, measured here as a large
device-to-device copy (bytes read plus written over its time).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def synchronize(torch: Any, device: str) -> None:
    """Wait for the device's queued work (CUDA); nothing on the CPU."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize(device)


def timed_on(torch: Any, device: str, fn: Callable[[], Any]) -> tuple[float, int | None]:
    """Wall seconds of one call, synchronised on CUDA, and on CUDA its peak allocated bytes."""
    cuda = str(device).startswith("cuda")
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    fn()
    synchronize(torch, device)
    seconds = time.perf_counter() - t0
    return seconds, int(torch.cuda.max_memory_allocated(device)) if cuda else None


def measure_bandwidth_gbs(
    torch: Any, device: str, *, mib: int | None = None, reps: int = 5
) -> float:
    """Memory bandwidth in GB/s (1e9 bytes per second): a copy of ``mib`` MiB (CUDA 2048, CPU 256)
    from one buffer to another, bytes read plus written over its time, median of ``reps`` timings
    (CUDA: each of 10 copies between CUDA events) after one warm-up copy."""
    cuda = str(device).startswith("cuda")
    n = (mib or (2048 if cuda else 256)) * 2**20
    src = torch.ones(n, dtype=torch.uint8, device=device)
    dst = torch.zeros(n, dtype=torch.uint8, device=device)
    dst.copy_(src)
    seconds = []
    if cuda:
        inner = 10
        with torch.cuda.device(device):
            for _ in range(reps):
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                for _ in range(inner):
                    dst.copy_(src)
                end.record()
                end.synchronize()
                seconds.append(start.elapsed_time(end) / 1e3 / inner)
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            dst.copy_(src)
            seconds.append(time.perf_counter() - t0)
    del src, dst
    if cuda:
        torch.cuda.empty_cache()
    return 2 * n / statistics.median(seconds) / 1e9


def bandwidth(torch: Any, device: str, given_gbs: float | None) -> tuple[float, str]:
    """``given_gbs`` (``--bandwidth-gbs``) if set, else the measured bandwidth; with where it came from."""
    if given_gbs:
        return float(given_gbs), "given (--bandwidth-gbs)"
    return measure_bandwidth_gbs(torch, device), "measured (device-to-device copy, read + write)"


def language_model(net: Any) -> Any:
    """The text decoder of a vision-language model (``net.model.language_model``), else ``net.get_decoder()``."""
    lm = getattr(getattr(net, "model", None), "language_model", None)
    return lm if lm is not None else net.get_decoder()


def decode_weight_bytes(net: Any) -> int:
    """Bytes of weights one decoding step reads: the language model's parameters without its input
    embedding (a step reads one row of it per sequence), plus the output head (also when it is
    tied to the input embedding). The vision tower and projector are not read while decoding."""
    params = {id(p): p for p in language_model(net).parameters()}
    for p in net.get_input_embeddings().parameters():
        params.pop(id(p), None)
    for p in net.get_output_embeddings().parameters():
        params[id(p)] = p
    return sum(p.numel() * p.element_size() for p in params.values())


def kv_bytes_per_token(net: Any) -> int:
    """Bytes of keys and values one token of context holds, over all layers (in the model's dtype)."""
    cfg = net.config.get_text_config()
    heads = int(cfg.num_attention_heads)
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads)
    elem = net.get_input_embeddings().weight.element_size()
    return 2 * int(cfg.num_hidden_layers) * kv_heads * head_dim * elem


def gpu_name(torch: Any, device: str) -> str | None:
    """The CUDA card's name; ``None`` on the CPU."""
    return str(torch.cuda.get_device_name(device)) if str(device).startswith("cuda") else None
