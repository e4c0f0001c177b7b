"""capjudge's client overhead on API judges: the same requests through a bare SDK loop and through capjudge.

A local OpenAI-protocol server that answers at once runs **in a separate process** (its CPU is not on
the client's GIL): a minimal HTTP/1.1 keep-alive server on asyncio, answering every
``POST .../chat/completions`` with a canned FLEUR-style answer (``0.xy``, four tokens, each with 20
``top_logprobs`` alternatives, as ``top_logprobs=20`` gets from OpenAI). Its own ceiling is measured
first with a trivial raw-socket client (pre-built requests on 64 keep-alive connections).

The samples: ``--images`` pictures (JPEGs of ~130 KB, 750x751, made from the bundled examples), each
with ``--captions`` captions, written to files in a temporary folder. One capjudge run with the
server in capture mode records what capjudge sends (messages with the images' data URLs,
``max_tokens``, ``temperature``, ``logprobs``, ``top_logprobs``); then, in each round, at each
concurrency (16 and 64), in turn:

(a) **SDK**: a bare ``openai.AsyncOpenAI`` loop sends the captured bodies (``create(**body)``, a
    semaphore of ``c``), answers parsed by the SDK as usual;
(b) **capjudge**: ``Judge("fleur", "openai-compatible:...", cache_dir=<fresh temp dir>,
    backend_options={"concurrency": c}).score_many(samples)`` from the image files: image loading,
    prompts, requests, cache writes, smoothing, records;
(b') the same with the cache off (``cache_dir=None``).

Each timing includes making the client and closing it. Medians over ``--rounds`` rounds. The ratio
is (b) over (a) at the same concurrency: what capjudge costs on top of the SDK for the same requests.

    .venv/bin/python benchmarks/bench_api.py                 # ~2 min on 2 cores
    .venv/bin/python benchmarks/bench_api.py --json          # last line: one JSON object
    .venv/bin/python benchmarks/bench_api.py --profile c16   # cProfile of one capjudge run at c=16
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _machine import cpu_name  # benchmarks/ is on sys.path when a script runs

ROOT = Path(__file__).resolve().parents[1]
MODEL = "bench-model"


# -- the server (runs in its own process: ``bench_api.py --serve PORTFILE [--capture DIR]``) --------
def answer_bodies(k: int = 20) -> list[bytes]:
    """Ten canned chat completions: ``0.d5`` for d = 0..9, one token per character, each token with
    ``k`` alternatives (digits and a few words), as OpenAI answers ``logprobs=true, top_logprobs=k``."""
    alts = [str(d) for d in range(10)] + [" ", "\n", "The", "I", "A", "**", "0.", "1.", "Score", ":"]
    bodies = []
    for d in range(10):
        text = f"0.{d}5"
        content = []
        for pos, tok in enumerate(text):
            top = [tok] + [a for a in alts if a != tok]
            top = top[:k]
            # A distribution (the alternatives' probabilities add up to at most 1: capjudge refuses
            # an answer whose top alternatives add up to more, as a real server never sends).
            lps = [-0.1 - 3.0 * i - 0.01 * pos for i in range(len(top))]
            content.append(
                {
                    "token": tok,
                    "logprob": lps[0],
                    "bytes": list(tok.encode()),
                    "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in zip(top, lps)],
                }
            )
        body = {
            "id": f"chatcmpl-bench{d}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": MODEL,
            "system_fingerprint": "fp_bench",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None}, "logprobs": {"content": content, "refusal": None}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 700, "completion_tokens": len(text), "total_tokens": 700 + len(text)},
        }
        bodies.append(json.dumps(body).encode())
    return bodies


def serve(port_file: str, capture: str | None) -> None:
    """Serve until killed; write the port to ``port_file`` once listening."""
    replies = [
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b
        for b in answer_bodies()
    ]
    not_found = b'{"error": {"message": "no route", "type": "invalid_request_error", "param": null, "code": null}}'
    reply_404 = b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: " + str(len(not_found)).encode() + b"\r\n\r\n" + not_found
    length_re = re.compile(rb"(?im)^content-length:\s*(\d+)")
    counter = [0]

    class Proto(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.t = transport
            self.buf = bytearray()
            self.need: int | None = None
            self.ok = True
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while True:
                if self.need is None:
                    end = self.buf.find(b"\r\n\r\n")
                    if end < 0:
                        return
                    head = bytes(self.buf[:end])
                    del self.buf[: end + 4]
                    m = length_re.search(head)
                    self.need = int(m.group(1)) if m else 0
                    self.ok = head.split(b" ", 2)[1].split(b"?")[0].endswith(b"/chat/completions")
                if len(self.buf) < self.need:
                    return
                body = bytes(self.buf[: self.need])
                del self.buf[: self.need]
                self.need = None
                if not self.ok:
                    self.t.write(reply_404)
                    continue
                n = counter[0]
                counter[0] += 1
                if capture:
                    Path(capture, f"{n:07d}.json").write_bytes(body)
                self.t.write(replies[len(body) % len(replies)])

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Proto, "127.0.0.1", 0, backlog=1024)
        port = server.sockets[0].getsockname()[1]
        Path(port_file + ".tmp").write_text(str(port))
        os.replace(port_file + ".tmp", port_file)
        await asyncio.Event().wait()

    asyncio.run(main())


class ServerProcess:
    """``bench_api.py --serve`` in a subprocess; ``url`` is its OpenAI-style base URL."""

    def __init__(self, workdir: Path, capture: Path | None = None) -> None:
        port_file = workdir / f"port-{time.monotonic_ns()}"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--serve", str(port_file)]
        if capture is not None:
            cmd += ["--capture", str(capture)]
        self.proc = subprocess.Popen(cmd)
        deadline = time.monotonic() + 30
        while not port_file.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the benchmark server did not start")
            time.sleep(0.02)
        self.port = int(port_file.read_text())
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def server_ceiling(port: int, bodies: list[bytes], connections: int = 64) -> float:
    """Requests per second the server answers to a trivial client: pre-built requests, ``connections``
    keep-alive connections each sending its next request when the previous answer is read."""
    path = b"/v1/chat/completions"
    requests = [
        b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " + str(len(b)).encode() + b"\r\n\r\n" + b
        for b in bodies
    ]

    async def worker(queue: list[bytes]) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while queue:
            writer.write(queue.pop())
            head = await reader.readuntil(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            await reader.readexactly(int(m.group(1)) if m else 0)
        writer.close()

    async def main() -> float:
        queue = list(requests)
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(queue) for _ in range(connections)))
        return len(requests) / (time.perf_counter() - t0)

    return asyncio.run(main())


# -- the samples --------------------------------------------------------------------------------
def make_images(folder: Path, n: int) -> list[Path]:
    """``n`` distinct JPEGs like a data set's (750x751, ~130 KB), from the bundled examples."""
    from PIL import Image, ImageOps

    sources = [Image.open(ROOT / "examples" / "images" / name).convert("RGB") for name in ("cats.jpg", "dog.jpg")]
    paths = []
    for i in range(n):
        img = sources[i % 2]
        if (i // 2) % 2:
            img = ImageOps.mirror(img)
        shift = (i // 4) % 40
        img = img.rotate(0.5 * shift, resample=Image.BILINEAR)
        path = folder / f"img{i:04d}.jpg"
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=90)
        path.write_bytes(buf.getvalue())
        paths.append(path)
    return paths


CAPTION_WORDS = ["a", "cat", "dog", "lying", "on", "the", "grass", "bed", "two", "grey", "orange", "sleeping", "next", "to", "each", "other", "blanket", "in", "sun", "happy"]


def make_samples(images: list[Path], per_image: int) -> list[Any]:
    from capjudge import Sample

    samples = []
    for i, path in enumerate(images):
        for j in range(per_image):
            words = [CAPTION_WORDS[(i * 7 + j * 3 + k * k) % len(CAPTION_WORDS)] for k in range(8 + j)]
            samples.append(Sample(str(path), " ".join(words) + f" ({i}.{j}).", id=f"{i}-{j}"))
    return samples


# -- the two clients ----------------------------------------------------------------------------
def run_sdk(url: str, bodies: list[dict[str, Any]], concurrency: int) -> float:
    """Seconds for a bare AsyncOpenAI loop to send every body (at most ``concurrency`` at once)."""
    import openai

    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0, timeout=60.0)
        sem = asyncio.Semaphore(concurrency)

        async def one(body: dict[str, Any]) -> Any:
            async with sem:
                # Fields outside the OpenAI protocol (vLLM's) travel in extra_body, as capjudge sends them.
                extra = {k: body[k] for k in ("repetition_penalty", "add_special_tokens") if k in body}
                rest = {k: v for k, v in body.items() if k not in extra}
                return await client.chat.completions.create(**rest, extra_body=extra or None)

        outs = await asyncio.gather(*(one(b) for b in bodies))
        assert all(o.choices[0].logprobs is not None for o in outs)
        await client.close()

    t0 = time.perf_counter()
    asyncio.run(main())
    return time.perf_counter() - t0


def run_capjudge(url: str, samples: list[Any], concurrency: int, cache_dir: Path | None) -> tuple[float, list[Any]]:
    """Seconds for capjudge to score every sample with FLEUR (judge made, run, closed)."""
    from capjudge import Judge

    t0 = time.perf_counter()
    judge = Judge("fleur", f"openai-compatible:{url}#{MODEL}", cache_dir=cache_dir, backend_options={"concurrency": concurrency})
    try:
        results = list(judge.score_many(samples))
    finally:
        judge.close()
    elapsed = time.perf_counter() - t0
    return elapsed, results


def check(results: list[Any], n: int) -> None:
    bad = [r for r in results if not r.ok or not r.smoothed]
    if len(results) != n or bad:
        raise SystemExit(f"capjudge run went wrong: {len(results)} results for {n} samples, {len(bad)} not ok/smoothed; first: {bad[0].error if bad else None}")


def machine() -> str:
    cpu = cpu_name()
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", metavar="PORTFILE", help=argparse.SUPPRESS)
    ap.add_argument("--capture", metavar="DIR", help=argparse.SUPPRESS)
    ap.add_argument("--images", type=int, default=100, help="distinct images (default 100)")
    ap.add_argument("--captions", type=int, default=5, help="captions per image (default 5)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds; medians are reported (default 5)")
    ap.add_argument("--concurrency", default="16,64", help="concurrencies (default 16,64)")
    ap.add_argument("--no-cache-off", action="store_true", help="skip the cache-off capjudge runs")
    ap.add_argument("--profile", metavar="cN", help="instead: cProfile one capjudge run (cache on) at concurrency N, print the top functions")
    ap.add_argument("--profile-target", choices=("cache", "nocache", "sdk"), default="cache", help="what --profile profiles (default: capjudge with the cache on)")
    ap.add_argument("--profile-clock", choices=("cpu", "wall"), default="cpu", help="--profile measures each thread's CPU time (default) or wall time")
    ap.add_argument("--profile-lines", type=int, default=30, help=argparse.SUPPRESS)
    ap.add_argument("--records", metavar="FILE", help="write the records of the last capjudge run (input order) as JSONL")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.capture)
        return 0

    concs = [int(c) for c in args.concurrency.split(",")]
    work = Path(tempfile.mkdtemp(prefix="capjudge-bench-api-"))
    servers: list[ServerProcess] = []
    try:
        images = make_images(work, args.images)
        samples = make_samples(images, args.captions)
        n = len(samples)

        # What capjudge sends: one run against a capturing server.
        capture = work / "capture"
        capture.mkdir()
        cap_server = ServerProcess(work, capture)
        servers.append(cap_server)
        _, results = run_capjudge(cap_server.url, samples, 16, None)
        check(results, n)
        cap_server.stop()
        servers.remove(cap_server)
        raw = [p.read_bytes() for p in sorted(capture.iterdir())]
        shutil.rmtree(capture)
        urls: dict[str, str] = {}
        bodies = []
        for blob in raw:
            body = json.loads(blob)
            for m in body["messages"]:  # one string object per image, as a client holds it
                for part in m["content"] if isinstance(m["content"], list) else ():
                    if part.get("type") == "image_url":
                        part["image_url"]["url"] = urls.setdefault(part["image_url"]["url"], part["image_url"]["url"])
            bodies.append(body)
        sent = {k: v for k, v in bodies[0].items() if k != "messages"}

        server = ServerProcess(work)
        servers.append(server)
        if args.profile:
            import cProfile
            import pstats
            import threading

            c = int(args.profile.lstrip("c"))
            # CPU time of each thread (GIL waits and I/O not counted), or wall time.
            clock = time.thread_time if args.profile_clock == "cpu" else time.perf_counter
            run_capjudge(server.url, samples, c, work / "warm")
            run_sdk(server.url, bodies, c)
            # Every thread under its own profiler (the judge, the backend's event loop, the cache writer).
            profiles: list[tuple[str, cProfile.Profile]] = []
            thread_run = threading.Thread.run

            def profiled_run(self: threading.Thread) -> None:
                prof = cProfile.Profile(clock)
                profiles.append((self.name, prof))
                prof.enable()
                try:
                    thread_run(self)
                finally:
                    prof.disable()

            def timed_run(self: threading.Thread) -> None:
                t0 = time.thread_time()
                try:
                    thread_run(self)
                finally:
                    cpu_by_thread.append((self.name, time.thread_time() - t0))

            cpu_by_thread: list[tuple[str, float]] = []
            threading.Thread.run = timed_run  # type: ignore[method-assign]
            for target in ("sdk", "cache", "nocache"):
                cpu_by_thread.clear()
                m0, p0 = time.thread_time(), time.process_time()
                if target == "sdk":
                    t = run_sdk(server.url, bodies, c)
                else:
                    t, _ = run_capjudge(server.url, samples, c, work / f"cpu-{target}" if target == "cache" else None)
                m1, p1 = time.thread_time(), time.process_time()
                threads = ", ".join(f"{name} {1000 * v / n:.2f}" for name, v in cpu_by_thread if v > 0.001)
                print(f"{target} c={c}: {t:.2f} s, {n / t:.0f} req/s, CPU ms/request: process {1000 * (p1 - p0) / n:.2f}, main {1000 * (m1 - m0) / n:.2f}, {threads}")
            threading.Thread.run = profiled_run  # type: ignore[method-assign]
            main_prof = cProfile.Profile(clock)
            profiles.append(("main", main_prof))
            target = args.profile_target
            cpu0 = time.process_time()
            main_prof.enable()
            if target == "sdk":
                t = run_sdk(server.url, bodies, c)
            else:
                t, _ = run_capjudge(server.url, samples, c, work / "prof-cache" if target == "cache" else None)
            main_prof.disable()
            cpu = time.process_time() - cpu0
            threading.Thread.run = thread_run  # type: ignore[method-assign]
            print(f"{target} c={c}: {t:.2f} s, {n / t:.0f} req/s, client CPU {cpu:.2f} s = {1000 * cpu / n:.2f} ms/request (under the profiler)")
            for name, prof in profiles:
                stats = pstats.Stats(prof)
                if not stats.total_tt:
                    continue
                print(f"\n===== thread {name}: {stats.total_tt:.2f} s")
                stats.sort_stats("tottime").print_stats(args.profile_lines)
                stats.sort_stats("cumulative").print_stats(args.profile_lines)
            return 0

        ceiling = statistics.median(server_ceiling(server.port, raw) for _ in range(3))
        # Warm-up: imports, connection set-up, first-call paths.
        run_sdk(server.url, bodies[:50], 16)
        run_capjudge(server.url, samples[:50], 16, None)

        timings: dict[str, list[float]] = {}
        last: list[Any] = []
        for r in range(args.rounds):
            for c in concs:
                timings.setdefault(f"sdk_c{c}", []).append(run_sdk(server.url, bodies, c))
                t, last = run_capjudge(server.url, samples, c, work / f"cache-{r}-{c}")
                check(last, n)
                timings.setdefault(f"capjudge_c{c}", []).append(t)
                shutil.rmtree(work / f"cache-{r}-{c}", ignore_errors=True)
                if not args.no_cache_off:
                    t, last = run_capjudge(server.url, samples, c, None)
                    check(last, n)
                    timings.setdefault(f"capjudge_nocache_c{c}", []).append(t)
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in timings.items()), file=sys.stderr)
        if args.records:
            with open(args.records, "w") as f:
                for res in last:
                    f.write(json.dumps(res.to_dict(), sort_keys=True) + "\n")
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in timings.items()}
    out: dict[str, Any] = {
        "n_requests": n,
        "images": args.images,
        "captions_per_image": args.captions,
        "rounds": args.rounds,
        "server_ceiling_rps": round(ceiling, 1),
        "request_params": sent,
        "machine": machine(),
    }
    print(f"\n{n} FLEUR requests ({args.images} images x {args.captions} captions, ~{len(raw[0]) // 1024} KiB each), server ceiling {ceiling:.0f} req/s; medians of {args.rounds} rounds")
    print(f"params as sent by capjudge: {sent}")
    print("| concurrency | SDK s | SDK req/s | capjudge (cache on) s | req/s | ratio | capjudge (cache off) s | req/s | ratio |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in concs:
        sdk, cj = med[f"sdk_c{c}"], med[f"capjudge_c{c}"]
        off = med.get(f"capjudge_nocache_c{c}")
        out[f"overhead_ratio_c{c}"] = round(cj / sdk, 3)
        out[f"rps_sdk_c{c}"] = round(n / sdk, 1)
        out[f"rps_capjudge_c{c}"] = round(n / cj, 1)
        row = f"| {c} | {sdk:.2f} | {n / sdk:.0f} | {cj:.2f} | {n / cj:.0f} | {cj / sdk:.2f} |"
        if off is not None:
            out[f"overhead_ratio_nocache_c{c}"] = round(off / sdk, 3)
            out[f"rps_capjudge_nocache_c{c}"] = round(n / off, 1)
            row += f" {off:.2f} | {n / off:.0f} | {off / sdk:.2f} |"
        else:
            row += " - | - | - |"
        print(row)
    out["timings_s"] = {k: [round(x, 3) for x in v] for k, v in timings.items()}
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
