"""Throughput and latency of ``capjudge serve`` against the same backend called in-process.

Three phases on the tiny random HF LLaVA (built into a temporary folder; CPU unless ``--device``):

(a) in-process: ``Judge(method, backend, batch_size=B).score_many`` on N samples (the captions of
    the two example images; the judge packs each image's whole group of N/2 in one batch), and
    the same judge at batch size B exactly (the rows by image, B at a time: one prefix per batch);
(b) served: ``capjudge serve --max-batch B`` in its own process, and ``--clients`` (64) concurrent
    clients in this one, each sending one sample per request until N are judged; throughput, and
    the latency of each request (p50, p99). The clients are a minimal keep-alive HTTP/1.1 load
    generator on asyncio streams (``--client httpx``: ``httpx.AsyncClient``, ~5 ms of CPU per
    request on the build machine, taken from the cores the server runs on);
(c) overload: a server with a small ``--max-queue`` and ``--overload-clients`` clients sending
    without waiting: how many 200s, 429s and anything else (a 5xx or a dropped connection would be a
    failure), and the server's resident memory before, at its peak and after.

It prints the ratios served / in-process throughput (the target is at least 0.8) with p50 and p99,
the CPU milliseconds per sample of each side, and the load average of the shared machine. Both
sides first judge the N samples once (warm-up: the model loaded, every batch shape seen), then
rounds alternate (a) and (b) ``--reps`` times; the medians are reported.

    python benchmarks/bench_serve.py                    # N = 256, 64 clients, B = 16
    python benchmarks/bench_serve.py --json             # last line: one JSON object
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _machine import cpu_name  # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

IMAGES = ROOT / "examples" / "images"
WORDS = ["cat", "dog", "grey", "orange", "bed", "hat", "camera", "lying", "walks", "looks", "together", "black"]


def samples(n: int) -> list[dict[str, Any]]:
    """``n`` samples over the two example images, every caption different."""
    out = []
    for k in range(n):
        words = " ".join(WORDS[(k * 7 + j) % len(WORDS)] for j in range(6 + k % 5))
        out.append({"id": f"s{k}", "image": "cats.jpg" if k % 2 == 0 else "dog.jpg", "caption": f"a {words} number {k}."})
    return out


def in_process(judge: Any, rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Seconds to judge ``rows`` with a Judge in this process, and the CPU seconds it took."""
    c0, t0 = time.process_time(), time.perf_counter()
    results = list(judge.score_many(rows))
    seconds = time.perf_counter() - t0
    assert len(results) == len(rows)
    return seconds, time.process_time() - c0


def in_process_batches(judge: Any, rows: list[dict[str, Any]], size: int) -> tuple[float, float]:
    """As :func:`in_process`, at batch size ``size`` exactly: the rows sorted by image and given
    to ``score_many`` ``size`` at a time (every batch one image's captions: one prefix each).
    ``score_many`` on all the rows at once packs each image's whole group into one batch (64
    captions here, whatever ``batch_size``), which no server seeing one row per request can."""
    ordered = sorted(rows, key=lambda row: str(row["image"]))
    c0, t0 = time.process_time(), time.perf_counter()
    results = [r for k in range(0, len(ordered), size) for r in judge.score_many(ordered[k : k + size])]
    seconds = time.perf_counter() - t0
    assert len(results) == len(rows)
    return seconds, time.process_time() - c0


def batch_stats(url: str) -> dict[str, float]:
    """Batches the server ran and their mean size (its /metrics)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    values = {s.name: s.value for f in text_string_to_metric_families(httpx.get(f"{url}/metrics").text) for s in f.samples}
    count = values.get("capjudge_batch_size_count", 0.0)
    return {"batches": count, "judge_seconds": values.get("capjudge_batch_seconds_sum", 0.0)}


class Server:
    """``capjudge serve`` in a process of its own."""

    def __init__(self, spec: str, method: str, port: int, *extra: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)}  # keep the caller's path
        env.pop("CAPJUDGE_TOKEN", None)
        self.url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "capjudge.cli", "serve", "--method", method, "--backend", spec, "--images", str(IMAGES), "--no-cache", "--port", str(port), "--quiet", *extra]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        import httpx

        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")
            time.sleep(0.2)

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) the server process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        """The server's resident memory (MiB)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> int:
        import signal

        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)


async def raw_post(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes) -> tuple[int, dict[str, str]]:
    """Send one pre-encoded HTTP/1.1 request on a keep-alive connection; (status, headers)."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers


Stats = tuple[float, list[float], dict[int, int]]


async def drive(items: list[Any], n_clients: int, poster: Any, *, retry: bool) -> Stats:
    """``n_clients`` concurrent clients, each taking the next item and sending it in one request
    until none is left (after a 429, again after its Retry-After when ``retry``): (seconds,
    latencies of the answered requests, count by status; -1 for a connection error). ``poster()``
    gives each client its own ``post(item) -> (status, headers)`` and ``close()``."""
    todo = list(reversed(items))
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def one() -> None:
        post = poster()
        try:
            while todo:
                item = todo.pop()
                while True:
                    t0 = time.perf_counter()
                    status, headers = await post.post(item)
                    statuses[status] = statuses.get(status, 0) + 1
                    if status == 200:
                        latencies.append(time.perf_counter() - t0)
                        break
                    if not retry:
                        break
                    await asyncio.sleep(float(headers.get("retry-after", "1")) if status == 429 else 0.5)
        finally:
            post.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n_clients)))
    return time.perf_counter() - t0, latencies, statuses


class RawPoster:
    """One keep-alive connection (asyncio streams), opened at the first request and again after an
    error; requests are pre-encoded bytes."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, request: bytes) -> tuple[int, dict[str, str]]:
        try:
            if self.conn is None:
                self.conn = await asyncio.open_connection(self.host, self.port)
            return await raw_post(*self.conn, request)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            self.conn = None
            return -1, {}

    def close(self) -> None:
        if self.conn is not None:
            self.conn[1].close()


async def raw_clients(url: str, rows: list[dict[str, Any]], n_clients: int, *, retry: bool) -> Stats:
    """As :func:`clients`, with a minimal load generator: one keep-alive connection per client
    (asyncio streams) and the request bodies encoded before the clock starts, so that the
    clients' own CPU (they share the server's cores here) is small."""
    host, _, port = url.removeprefix("http://").partition(":")
    requests = []
    for row in rows:
        body = json.dumps({"samples": [row]}).encode()
        requests.append(f"POST /v1/score HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    return await drive(requests, n_clients, lambda: RawPoster(host, int(port)), retry=retry)


async def clients(url: str, rows: list[dict[str, Any]], n_clients: int, *, retry: bool) -> Stats:
    """``n_clients`` concurrent clients sending one row per request (``httpx.AsyncClient``):
    (seconds, latencies of the answered requests, count by status; -1 for a connection error)."""
    import httpx

    limits = httpx.Limits(max_connections=n_clients, max_keepalive_connections=n_clients)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        class HttpxPoster:
            async def post(self, row: dict[str, Any]) -> tuple[int, dict[str, str]]:
                try:
                    r = await client.post("/v1/score", json={"samples": [row]})
                except httpx.HTTPError:
                    return -1, {}
                return r.status_code, dict(r.headers)

            def close(self) -> None:
                pass  # the shared client closes with the block

        return await drive(rows, n_clients, HttpxPoster, retry=retry)


def loadavg() -> float:
    """The machine's 1-minute load average (how busy the shared cores were)."""
    return float(Path("/proc/loadavg").read_text().split()[0])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=256, help="samples per round (default 256)")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16, help="batch size in-process and --max-batch of the server (default 16)")
    parser.add_argument("--method", default="vanilla")
    parser.add_argument("--max-new-tokens", type=int, default=8, help="answer length (default 8: the model's forward passes dominate)")
    parser.add_argument("--max-wait-ms", type=float, default=20.0)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--overload-clients", type=int, default=256)
    parser.add_argument("--overload-queue", type=int, default=32)
    parser.add_argument("--client", choices=("raw", "httpx"), default="raw", help="load generator: raw (asyncio streams, bodies encoded ahead; default) or httpx.AsyncClient")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from capjudge.serve.server import free_port
    from capjudge.testing.tiny_llava import build_tiny_llava

    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_llava(Path(tmp) / "tiny")
        spec = f"hf:{model}?device={args.device}"
        rows = samples(args.n)
        server = Server(spec, args.method, free_port(), "--max-batch", str(args.batch), "--max-wait-ms", str(args.max_wait_ms), "--max-queue", str(max(args.n, 1024)), "--max-new-tokens", str(args.max_new_tokens))
        local_s: list[float] = []
        batched_s: list[float] = []
        served_s: list[float] = []
        local_cpu = server_cpu = client_cpu = 0.0
        load = loadavg()
        run_clients = raw_clients if args.client == "raw" else clients
        lat: list[float] = []
        from capjudge.judges.judge import Judge

        judge = Judge(args.method, spec, images_root=IMAGES, batch_size=args.batch, max_new_tokens=args.max_new_tokens)
        try:
            # Warm-up, both sides: the model loaded, every batch shape seen once.
            in_process(judge, rows)
            in_process_batches(judge, rows, args.batch)
            asyncio.run(run_clients(server.url, rows, args.clients, retry=True))
            warm = batch_stats(server.url)
            for _ in range(args.reps):  # interleaved: a load change on the shared machine hits both
                seconds, cpu = in_process(judge, rows)
                local_s.append(seconds)
                local_cpu += cpu
                batched_s.append(in_process_batches(judge, rows, args.batch)[0])
                c0, s0 = time.process_time(), server.cpu_seconds()
                seconds, latencies, statuses = asyncio.run(run_clients(server.url, rows, args.clients, retry=True))
                client_cpu += time.process_time() - c0
                server_cpu += server.cpu_seconds() - s0
                assert statuses.get(200) == len(rows), statuses
                served_s.append(seconds)
                lat.extend(latencies)
            timed = batch_stats(server.url)
        finally:
            judge.close()
            server.stop()
        batches = timed["batches"] - warm["batches"]
        judge_seconds = timed["judge_seconds"] - warm["judge_seconds"]

        # Overload: a small queue, many clients, no retries.
        over = Server(spec, args.method, free_port(), "--max-batch", str(args.batch), "--max-wait-ms", str(args.max_wait_ms), "--max-queue", str(args.overload_queue), "--max-new-tokens", str(args.max_new_tokens))
        peak = [0.0]
        stop = threading.Event()

        def watch() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], over.rss_mib())
                time.sleep(0.05)

        try:
            asyncio.run(run_clients(over.url, rows[: args.batch], 4, retry=True))  # model loaded
            before = over.rss_mib()
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            overload_rows = samples(args.overload_clients * 4)
            o_seconds, _, o_statuses = asyncio.run(run_clients(over.url, overload_rows, args.overload_clients, retry=False))
            stop.set()
            watcher.join()
            after = over.rss_mib()
            alive = over.proc.poll() is None
        finally:
            code = over.stop()

    local_tp = args.n / statistics.median(local_s)
    served_tp = args.n / statistics.median(served_s)
    batched_tp = args.n / statistics.median(batched_s)
    report = {
        "machine": cpu_name(),
        "cores": os.cpu_count(),
        "load_average_1m_before": load,
        "load_average_1m_after": loadavg(),
        "client": args.client,
        "n": args.n,
        "clients": args.clients,
        "batch": args.batch,
        "method": args.method,
        "max_new_tokens": args.max_new_tokens,
        "in_process_samples_per_s": round(local_tp, 2),
        "in_process_batch_b_samples_per_s": round(batched_tp, 2),
        "served_samples_per_s": round(served_tp, 2),
        "ratio_served_over_in_process": round(served_tp / local_tp, 3),
        "ratio_served_over_in_process_batch_b": round(served_tp / batched_tp, 3),
        "served_batches": batches,
        "served_mean_batch": round(args.n * args.reps / batches, 2) if batches else 0.0,
        "served_judge_busy_share": round(judge_seconds / sum(served_s), 3),
        "served_judge_samples_per_s": round(args.n * args.reps / judge_seconds, 2) if judge_seconds else 0.0,
        "in_process_seconds": [round(x, 3) for x in local_s],
        "in_process_batch_b_seconds": [round(x, 3) for x in batched_s],
        "served_seconds": [round(x, 3) for x in served_s],
        "cpu_ms_per_sample": {
            "in_process": round(1000 * local_cpu / (args.n * args.reps), 2),
            "server": round(1000 * server_cpu / (args.n * args.reps), 2),
            "clients": round(1000 * client_cpu / (args.n * args.reps), 2),
        },
        "latency_p50_s": round(percentile(lat, 0.5), 3),
        "latency_p99_s": round(percentile(lat, 0.99), 3),
        "overload": {
            "clients": args.overload_clients,
            "max_queue": args.overload_queue,
            "requests": sum(o_statuses.values()),
            "by_status": {str(k): v for k, v in sorted(o_statuses.items())},
            "seconds": round(o_seconds, 1),
            "rss_mib_before": round(before, 1),
            "rss_mib_peak": round(peak[0], 1),
            "rss_mib_after": round(after, 1),
            "server_alive_after": alive,
            "exit_code_after_sigterm": code,
        },
    }
    if not args.json:
        print(f"machine: {report['machine']}")
        print(f"in-process (all rows at once): {local_tp:.1f} samples/s   in-process (batches of {args.batch}, one image each): {batched_tp:.1f} samples/s")
        print(f"served ({args.clients} clients): {served_tp:.1f} samples/s   ratio {served_tp / local_tp:.2f} (all at once), {served_tp / batched_tp:.2f} (batches of {args.batch})")
        print(f"CPU ms per sample: {report['cpu_ms_per_sample']}   load average {load} -> {report['load_average_1m_after']} on {os.cpu_count()} cores")
        print(f"latency p50 {report['latency_p50_s']} s   p99 {report['latency_p99_s']} s")
        print(f"overload: {report['overload']}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
