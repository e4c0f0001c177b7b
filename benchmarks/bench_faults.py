"""What 1% of hanging requests cost an API run: the same 2,000 requests with and without faults.

A fake OpenAI-compatible server (tests/openai_fake_server.py) runs in this process on 127.0.0.1.
Every answer takes ``--latency`` (50 ms: the run is bound by its concurrency, as API runs are, not by
this machine's CPU). In the faulty run, 1% of the requests (every 100th, from the 50th on) hang until
the client's timeout. The figure of merit is

    ratio = (faulty time - clean time) / (timeouts' own total duration / concurrency)

A perfect sliding window pays each timeout on one of ``concurrency`` slots, ratio ~1; the last timeout
cannot overlap with anything once the other work is done, so a run bound only by its slots gets about
1 + (c - 1) / n for n timeouts on c slots (``bound_last_timeout``; less when the CPU is also a limit,
as it is for this in-process server on 2 cores). Batch barriers (``--barrier``: the judge hands the backend batches of 64 and
waits for each) pay a whole timeout per batch that holds one, ratio ~c.

    .venv/bin/python benchmarks/bench_faults.py              # ~2 min on 2 cores
    .venv/bin/python benchmarks/bench_faults.py --json       # last line: one JSON object
    .venv/bin/python benchmarks/bench_faults.py --barrier    # also the batch-barrier engine (~1 min more)
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _machine import cpu_name  # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the fake server lives with the tests

from capjudge import Judge, Sample  # noqa: E402
from capjudge.backends.registry import load_backend  # noqa: E402
from capjudge.judges.dispatch import BatchExecutor  # noqa: E402
from capjudge.judges.scoring import ScoringRun  # noqa: E402
from openai_fake_server import Received, Reply, default_responder, running_server  # noqa: E402


def png(i: int) -> bytes:
    """A small picture of its own for sample ``i`` (one caption per image, as in most data sets)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (i % 256, (i // 256) % 256, 200)).save(buf, format="PNG")
    return buf.getvalue()


def hangs(i: int, every: int) -> bool:
    """Which requests hang: every ``every``-th, from the middle of the first stretch on."""
    return every > 0 and i % every == every // 2


def run_once(url: str, n: int, *, concurrency: int, timeout: float, barrier: bool) -> tuple[float, list[Any]]:
    samples = [Sample(png(i), f"caption number {i} .", id=str(i)) for i in range(n)]
    backend = load_backend(f"openai-compatible:{url}#fake-model", concurrency=concurrency, timeout=timeout, max_retries=0)
    judge = Judge("vanilla", backend, batch_size=64)
    try:
        t0 = time.perf_counter()
        run = ScoringRun(judge, BatchExecutor(judge.backend)) if barrier else ScoringRun(judge)
        results = [r for _, r in run.run(samples)]
        elapsed = time.perf_counter() - t0
    finally:
        judge.close()
    return elapsed, results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="requests per run (default 2000)")
    ap.add_argument("--every", type=int, default=100, help="one request in this many hangs (default 100: 1%%)")
    ap.add_argument("--concurrency", type=int, default=8, help="requests in flight (default 8, the backend's default)")
    ap.add_argument("--timeout", type=float, default=2.0, help="client timeout in seconds (default 2)")
    ap.add_argument("--latency", type=float, default=0.05, help="seconds the server takes per answer (default 0.05: the run is bound by concurrency, as API runs are, not by this machine's CPU)")
    ap.add_argument("--reps", type=int, default=3, help="runs of each kind; medians are reported (default 3)")
    ap.add_argument("--barrier", action="store_true", help="also time the batch-barrier engine (one run each)")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args()

    faulty_mode = {"on": False}

    def respond(req: Received) -> Reply:
        reply = default_responder(req)
        text = req.prompt_text()
        i = int(text.split("caption number ", 1)[1].split(" ", 1)[0]) if "caption number " in text else -1
        reply.body["choices"][0]["message"]["content"] = "73"
        reply.delay = args.latency
        if faulty_mode["on"] and hangs(i, args.every):
            reply.delay = args.timeout + 3.0  # the client gives up first
        return reply

    def timed(kind: str, barrier: bool, reps: int) -> tuple[list[float], int]:
        faulty_mode["on"] = kind == "faulty"
        times, n_timeouts = [], 0
        for _ in range(reps):
            elapsed, results = run_once(srv.base_url, args.n, concurrency=args.concurrency, timeout=args.timeout, barrier=barrier)
            n_timeouts = sum(1 for r in results if not r.ok)
            bad = [r.error for r in results if not r.ok and "time" not in (r.error or "").lower()]
            assert not bad, f"unexpected errors: {bad[:3]}"
            times.append(elapsed)
        return times, n_timeouts

    with running_server(responder=respond) as srv:
        faulty_mode["on"] = False
        run_once(srv.base_url, 100, concurrency=args.concurrency, timeout=args.timeout, barrier=False)  # warm-up
        clean, _ = timed("clean", False, args.reps)
        faulty, n_timeouts = timed("faulty", False, args.reps)
        barrier = None
        if args.barrier:
            b_clean, _ = timed("clean", True, 1)
            b_faulty, _ = timed("faulty", True, 1)
            barrier = {"clean_s": b_clean[0], "faulty_s": b_faulty[0]}

    budget = n_timeouts * args.timeout / args.concurrency
    t_clean, t_faulty = statistics.median(clean), statistics.median(faulty)
    extra = t_faulty - t_clean
    ratio = extra / budget if budget else float("nan")
    out: dict[str, Any] = {
        "n": args.n,
        "timeouts": n_timeouts,
        "timeout_s": args.timeout,
        "concurrency": args.concurrency,
        "latency_s": args.latency,
        "clean_s": round(t_clean, 3),
        "faulty_s": round(t_faulty, 3),
        "clean_runs_s": [round(t, 3) for t in clean],
        "faulty_runs_s": [round(t, 3) for t in faulty],
        "extra_s": round(extra, 3),
        "timeouts_over_concurrency_s": round(budget, 3),
        "ratio": round(ratio, 3),
        "bound_last_timeout": round(1 + (args.concurrency - 1) / n_timeouts, 3) if n_timeouts else None,
        "machine": f"{cpu_name()}, {platform.python_version()}",
    }
    if barrier is not None:
        b_extra = barrier["faulty_s"] - barrier["clean_s"]
        out["barrier"] = {**{k: round(v, 3) for k, v in barrier.items()}, "extra_s": round(b_extra, 3), "ratio": round(b_extra / budget, 3) if budget else None}
    print(f"{args.n} requests, {n_timeouts} hang until the {args.timeout:g} s timeout, concurrency {args.concurrency}")
    print(f"  clean  {t_clean:7.2f} s   (runs: {', '.join(f'{t:.2f}' for t in clean)})")
    print(f"  faulty {t_faulty:7.2f} s   (runs: {', '.join(f'{t:.2f}' for t in faulty)})")
    print(f"  extra  {extra:7.2f} s   timeouts / concurrency = {budget:.2f} s")
    print(f"  ratio  {ratio:7.2f}     (target < 1.5; a perfect window in a run bound only by its slots: ~{out['bound_last_timeout']}, the last timeout ending alone)")
    if barrier is not None:
        print(f"  batch barriers: clean {barrier['clean_s']:.2f} s, faulty {barrier['faulty_s']:.2f} s, ratio {out['barrier']['ratio']:.2f}")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
