"""Batch mode (``--batch``) end to end against the fake server's files and batches endpoints:
batches that complete after a delay, lines that fail, a batch that expires, a run killed with
SIGKILL between upload and collect and run again; records equal to an online run's, every sample
scored once, no request submitted twice, costs at batch prices. Also splitting at the per-batch
limits, export/import, cancel, two-step methods, pairs, Azure."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from capjudge.backends.openai.batch import (
    BatchLimits,
    BatchState,
    JobWriter,
    LineTooLarge,
    read_jsonl,
    state_paths,
)
from capjudge.backends.usage import BATCH_DISCOUNT, PriceTable
from capjudge.cli import EXIT_BACKEND, EXIT_OK, EXIT_USAGE, main
from capjudge.cli.batch import EXIT_SUBMITTED, SUBMITTED_MESSAGE
from capjudge.core.errors import EXIT_ALL_FAILED
from openai_fake_server import Received, running_server

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "examples" / "images"
SRC = ROOT / "src"


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_samples(path: Path, n: int) -> Path:
    images = ("cats.jpg", "dog.jpg")
    path.write_text("".join(json.dumps({"id": f"s{i}", "image": images[i % 2], "caption": f"a caption, number {i}"}) + "\n" for i in range(n)))
    return path


def command(server: Any, inp: Path, out: Path, cache: Path, *extra: str, method: str = "fleur") -> list[str]:
    return [
        "score", "--method", method, "--backend", f"openai-compatible:{server.base_url}#gpt-4o",
        "--input", str(inp), "--images", str(IMAGES), "--out", str(out), "--cache-dir", str(cache), "--quiet", *extra,
    ]  # fmt: skip


def chat_calls(server: Any) -> int:
    return sum(1 for r in server.received if r.path.endswith("/chat/completions"))


def comparable(rec: dict[str, Any]) -> dict[str, Any]:
    """A record without what batch mode changes on purpose: the price and the batch id."""
    rec = json.loads(json.dumps(rec))
    meta = rec["details"].get("backend_meta") or {}
    meta.pop("cost_usd", None)
    meta.pop("batch_id", None)
    rec["backend"] = rec["backend"].split("#")[1]  # the two servers' ports differ
    return rec


def online_records(inp: Path, tmp: Path, method: str = "fleur", extra: tuple[str, ...] = (), **server_kw: Any) -> list[dict[str, Any]]:
    with running_server(**server_kw) as online:
        out = tmp / "online.jsonl"
        assert main(command(online, inp, out, tmp / "online-cache", "--no-cache", *extra, method=method)) == EXIT_OK
    return read(out)


# -- splitting at the provider's limits ------------------------------------------------------------
def test_job_writer_splits_at_request_and_byte_limits(tmp_path: Path) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 100}]}
    w = JobWriter(tmp_path, "p", 1, "/v1/chat/completions", BatchLimits(max_requests=3, max_bytes=10_000))
    for i in range(7):
        w.add(f"k{i}", body, cacheable=True, wanted_logprobs=False)
    jobs = w.close()
    assert [j.lines for j in jobs] == [3, 3, 1]
    for job in jobs:
        lines = list(read_jsonl(tmp_path / job.input))
        assert len(lines) == job.lines and (tmp_path / job.input).stat().st_size == job.bytes
        assert all(line["method"] == "POST" and line["url"] == "/v1/chat/completions" and line["body"] == body for line in lines)
        assert [i["id"] for i in read_jsonl(tmp_path / job.info)] == [line["custom_id"] for line in lines]
    one = len((tmp_path / jobs[0].input).read_bytes().splitlines()[0]) + 1
    w = JobWriter(tmp_path / "b", "p", 1, "/v1/chat/completions", BatchLimits(max_requests=100, max_bytes=2 * one + 10))
    for i in range(5):
        w.add(f"k{i}", body, cacheable=True, wanted_logprobs=False)
    jobs = w.close()
    assert [j.lines for j in jobs] == [2, 2, 1]
    assert all(j.bytes <= 2 * one + 10 for j in jobs)
    w = JobWriter(tmp_path / "c", "p", 1, "/v1/chat/completions", BatchLimits(max_requests=10, max_bytes=50))
    with pytest.raises(LineTooLarge, match="more than one batch may hold"):
        w.add("k", body, cacheable=True, wanted_logprobs=False)


def test_batch_prices() -> None:
    table = PriceTable({"my-model": {"input": 2.0, "output": 8.0, "batch_input": 0.5, "batch_output": 1.0}})
    standard = table.lookup("gpt-4o")
    batch = table.batch_lookup("gpt-4o-2024-08-06")
    assert standard is not None and batch is not None
    assert batch.input == pytest.approx(standard.input * BATCH_DISCOUNT) and batch.output == pytest.approx(standard.output * BATCH_DISCOUNT)
    assert table.batch_lookup("my-model") is not None and table.batch_lookup("my-model").input == 0.5  # type: ignore[union-attr]
    assert table.batch_lookup("unknown-model") is None


# -- end to end ------------------------------------------------------------------------------------
def fault(bad_400: set[str], bad_500_once: set[str]) -> Any:
    """A line fault: 400 for some prompts (a permanent failure), 500 in the first batch for others."""

    def decide(custom_id: str, body: dict[str, Any], number: int) -> int | None:
        text = Received("POST", "", {}, {}, body).prompt_text()
        if any(c in text for c in bad_400):
            return 400
        if number == 1 and any(c in text for c in bad_500_once):
            return 500
        return None

    return decide


@pytest.mark.slow
def test_batch_run_killed_twice_between_upload_and_collect_resumes(tmp_path: Path) -> None:
    inp = write_samples(tmp_path / "in.jsonl", 12)
    expected = {r["id"]: r for r in online_records(inp, tmp_path)}
    out, cache = tmp_path / "batch.jsonl", tmp_path / "cache"
    kw = {"batch_delay": 0.3, "batch_fault": fault({"number 9"}, {"number 4"}), "expire_batches": [2], "batch_call_delay": {"batches": 3.0}}
    with running_server(**kw) as server:
        argv = command(server, inp, out, cache, "--batch", "--wait", "--poll-interval", "0.1", "--batch-max-requests", "5")
        env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        proc = subprocess.Popen([sys.executable, "-m", "capjudge.cli", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while not server.batches and time.monotonic() < deadline:  # the first batch is created ...
            time.sleep(0.02)
        assert server.batches, "no batch was created"
        os.kill(proc.pid, signal.SIGKILL)  # ... and the client dies before it hears of it
        proc.wait(timeout=30)
        state_path, work = state_paths(out)
        state = BatchState.load(state_path)
        assert [j.status for j in state.jobs] == ["creating", "prepared", "prepared"]  # written before each step
        assert len(server.batches) == 1 and len([f for f in server.files.values() if f["purpose"] == "batch"]) == 1

        # The same command again, killed this time while it waits for its batches to end.
        server.batch_call_delay, server.batch_delay = {}, 60.0
        proc = subprocess.Popen([sys.executable, "-m", "capjudge.cli", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # until all three batches are created and in the state
            with contextlib.suppress(Exception):
                if [j.status for j in BatchState.load(state_path).jobs] == ["in_progress"] * 3:
                    break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert [j.status for j in BatchState.load(state_path).jobs] == ["in_progress"] * 3
        server.batch_delay = 0.3
        assert main(argv) == EXIT_OK  # and again: it collects, re-submits, collects, writes --out
        assert not state_path.exists() and not work.exists()  # a finished run leaves no state behind
        # Three batches of round 1 (the one created before the kill was found, not created again);
        # round 2 re-submits the lines that expired or failed with 500.
        assert len(server.batches) == 4
        creates = [r for r in server.batch_requests if r == ("POST", "/batches")]
        assert len(creates) == 4
        assert chat_calls(server) == 0  # no online request
        counts = server.batch_line_counts
        twice = {k for k, n in counts.items() if n == 2}
        assert all(n in (1, 2) for n in counts.values())
        assert len(twice) == 1  # the 500 of the first batch; the expired lines were never run
        assert len(counts) == 12
    records = read(out)
    assert [r["id"] for r in records] == [f"s{i}" for i in range(12)]  # every sample once, in order
    bad = records[9]
    assert bad["status"] == "error" and "HTTP 400" in bad["error"] and bad["details"]["resumable"] is False
    for rec in records:
        if rec["id"] == "s9":
            continue
        assert rec["status"] == "ok"
        assert comparable(rec) == comparable(expected[rec["id"]])
        online_cost = expected[rec["id"]]["details"]["backend_meta"]["cost_usd"]
        assert rec["details"]["backend_meta"]["cost_usd"] == pytest.approx(online_cost * BATCH_DISCOUNT)
        assert rec["details"]["backend_meta"]["batch_id"].startswith("batch-")
        assert rec["details"]["smoothed"] if "smoothed" in rec["details"] else rec["smoothed"]


@pytest.mark.slow
def test_kill_during_upload_reuses_the_uploaded_file(tmp_path: Path) -> None:
    inp = write_samples(tmp_path / "in.jsonl", 4)
    out = tmp_path / "b.jsonl"
    with running_server(batch_call_delay={"files": 3.0}) as server:
        argv = command(server, inp, out, tmp_path / "cache", "--batch")
        env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        proc = subprocess.Popen([sys.executable, "-m", "capjudge.cli", *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not server.files and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert BatchState.load(state_paths(out)[0]).jobs[0].status == "uploading"
        server.batch_call_delay = {}
        assert main(argv) == EXIT_SUBMITTED  # found its file, created the batch
        assert len(server.files) == 1 and len(server.batches) == 1
        assert main(argv + ["--wait", "--poll-interval", "0.05"]) == EXIT_OK
        assert len(read(out)) == 4 and all(r["status"] == "ok" for r in read(out))
        assert set(server.batch_line_counts.values()) == {1}


def test_submitted_exit_code_and_message_then_collect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = write_samples(tmp_path / "in.jsonl", 6)
    out = tmp_path / "b.jsonl"
    with running_server(batch_delay=30.0) as server:
        argv = command(server, inp, out, tmp_path / "cache", "--batch", "--batch-max-requests", "4")
        assert main(argv) == EXIT_SUBMITTED
        assert SUBMITTED_MESSAGE in capsys.readouterr().err
        assert not out.exists() or read(out) == []
        assert main(argv) == EXIT_SUBMITTED  # still in progress: nothing submitted again
        assert len(server.batches) == 2
        assert main(["batch", "status", str(out)]) == 0
        assert "in_progress" in capsys.readouterr().out
        server.batch_delay = 0.0
        assert main(["batch", "collect", str(out)]) == EXIT_OK
        assert len(server.batches) == 2 and chat_calls(server) == 0
        records = read(out)
        assert len(records) == 6 and all(r["status"] == "ok" for r in records)
        # A re-run finds everything in --out: nothing is asked, no batch made.
        assert main(argv) == EXIT_OK
        assert len(server.batches) == 2
        # The answers are in the normal response cache: an online run to another --out asks nothing.
        again = tmp_path / "again.jsonl"
        assert main(command(server, inp, again, tmp_path / "cache")) == EXIT_OK
        assert chat_calls(server) == 0 and all(r["details"]["cached"] for r in read(again))


def test_cancel_then_the_next_run_asks_again(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = write_samples(tmp_path / "in.jsonl", 3)
    out = tmp_path / "b.jsonl"
    with running_server(batch_delay=30.0) as server:
        argv = command(server, inp, out, tmp_path / "cache", "--batch")
        assert main(argv) == EXIT_SUBMITTED
        assert main(["batch", "cancel", str(out)]) == 0
        assert ("POST", "/batches/batch-0002/cancel") in server.batch_requests
        server.batch_delay = 0.0
        assert main(argv + ["--wait", "--poll-interval", "0.05"]) == EXIT_OK
        assert len(server.batches) == 2  # the cancelled one and its replacement
        assert [b["status"] for b in server.batches.values()] == ["cancelled", "completed"]
        assert all(r["status"] == "ok" for r in read(out)) and len(read(out)) == 3
        assert set(server.batch_line_counts.values()) == {1}  # the cancelled batch ran nothing


def test_failed_lines_fall_back_online(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = write_samples(tmp_path / "in.jsonl", 6)
    expected = {r["id"]: comparable(r) for r in online_records(inp, tmp_path)}
    out = tmp_path / "b.jsonl"
    with running_server(expire_batches=[1]) as server:
        argv = command(server, inp, out, tmp_path / "cache", "--batch", "--wait", "--poll-interval", "0.05", "--batch-failed", "online")
        argv.remove("--quiet")
        assert main(argv) == EXIT_OK
        assert len(server.batches) == 1
        assert chat_calls(server) == 3  # the half of the expired batch that never ran
        summary = capsys.readouterr().out
        assert "expired/failed, sent online" in summary and "calls at batch prices" in summary
    records = read(out)
    assert {r["id"]: comparable(r) for r in records} == expected
    assert sum("batch_id" in r["details"]["backend_meta"] for r in records) == 3


def test_lines_unanswered_after_all_attempts_are_resumable_errors(tmp_path: Path) -> None:
    inp = write_samples(tmp_path / "in.jsonl", 2)
    out = tmp_path / "b.jsonl"
    with running_server(batch_fault=lambda cid, body, n: 503) as server:
        argv = command(server, inp, out, tmp_path / "cache", "--batch", "--wait", "--poll-interval", "0.05", "--batch-attempts", "2")
        assert main(argv) == EXIT_BACKEND
        assert len(server.batches) == 2 and set(server.batch_line_counts.values()) == {2}
        records = read(out)
        assert all(r["status"] == "error" and r["details"]["resumable"] and "not answered by 2 batches" in r["error"] for r in records)
        server.batch_fault = None
        assert main(argv) == EXIT_OK  # re-running resumes, in new batches
        assert all(r["status"] == "ok" for r in read(out))


def test_two_step_method_runs_in_rounds(tmp_path: Path) -> None:
    inp = write_samples(tmp_path / "in.jsonl", 6)
    expected = {r["id"]: comparable(r) for r in online_records(inp, tmp_path, method="visce2")}
    out = tmp_path / "b.jsonl"
    with running_server() as server:
        argv = command(server, inp, out, tmp_path / "cache", "--batch", "--wait", "--poll-interval", "0.05", method="visce2")
        assert main(argv) == EXIT_OK
        assert len(server.batches) == 2  # the two images' descriptions, then the six scores
        assert [b["request_counts"]["total"] for b in server.batches.values()] == [2, 6]
        assert chat_calls(server) == 0
    assert {r["id"]: comparable(r) for r in read(out)} == expected


def test_pairs_and_azure(tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"id": f"p{i}", "image": "cats.jpg", "caption_a": f"cat {i}", "caption_b": f"dog {i}"}) + "\n" for i in range(3)))
    out = tmp_path / "pairs_out.jsonl"
    with running_server(responder=lambda req: __import__("openai_fake_server").Reply(body=__import__("openai_fake_server").chat_body("Caption A is better. [[A]]"))) as server:
        argv = [
            "compare", "--backend", "azure:my-dep", "--input", str(pairs), "--images", str(IMAGES), "--out", str(out),
            "--cache-dir", str(tmp_path / "cache"), "--quiet", "--batch", "--wait", "--poll-interval", "0.05",
            "--backend-opt", f"azure_endpoint={server.endpoint}", "--backend-opt", "api_version=2024-10-21",
        ]  # fmt: skip
        env = {"AZURE_OPENAI_API_KEY": "azure-test-key-123"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            assert main(argv) == EXIT_OK
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        batch = next(iter(server.batches.values()))
        assert batch["endpoint"] == "/chat/completions" and batch["request_counts"]["total"] == 6  # both orders
        lines = [json.loads(x) for x in server.files[batch["input_file_id"]]["data"].splitlines()]
        assert all(line["url"] == "/chat/completions" and line["body"]["model"] == "my-dep" for line in lines)
        assert ("POST", "/files") in server.batch_requests and chat_calls(server) == 0
    records = read(out)
    assert len(records) == 3 and all(r["status"] == "ok" and r["mode"] == "pairwise" for r in records)


def test_batch_lines_carry_the_online_request_body(tmp_path: Path) -> None:
    inp = write_samples(tmp_path / "in.jsonl", 3)
    with running_server() as online:
        assert main(command(online, inp, tmp_path / "o.jsonl", tmp_path / "c1", "--no-cache")) == EXIT_OK
        sent = sorted((r.body for r in online.received), key=json.dumps)
    export = tmp_path / "requests.jsonl"
    with running_server() as server:
        assert main(command(server, inp, tmp_path / "e.jsonl", tmp_path / "c2", "--batch-export", str(export))) == EXIT_OK
        assert server.count == 0 and not server.batch_requests  # nothing submitted
    lines = list(read_jsonl(export))
    assert sorted((line["body"] for line in lines), key=json.dumps) == sent
    assert len({line["custom_id"] for line in lines}) == 3


def test_export_import_round_trip(tmp_path: Path) -> None:
    """Export, answer the file as vLLM's ``run-batch`` would (same output format), import."""
    from openai_fake_server import default_responder

    inp = write_samples(tmp_path / "in.jsonl", 5)
    expected = {r["id"]: comparable(r) for r in online_records(inp, tmp_path)}
    export, answers = tmp_path / "requests.jsonl", tmp_path / "answers.jsonl"
    out = tmp_path / "r.jsonl"
    with running_server() as server:
        argv = command(server, inp, out, tmp_path / "cache", "--batch-export", str(export))
        assert main(argv) == EXIT_OK
        rows = []
        for i, line in enumerate(read_jsonl(export)):
            reply = default_responder(Received("POST", line["url"], {}, {}, line["body"]))
            rows.append({"id": f"vllm-{i}", "custom_id": line["custom_id"], "response": {"status_code": 200, "request_id": f"r{i}", "body": reply.body}, "error": None})
        rows.append({"id": "x", "custom_id": "not-a-request-of-this-run", "response": {"status_code": 200, "body": {}}, "error": None})
        answers.write_text("".join(json.dumps(r) + "\n" for r in rows))
        argv = command(server, inp, out, tmp_path / "cache", "--batch-import", str(answers))
        assert main(argv) == EXIT_OK
        assert server.count == 0 and not server.batch_requests
        # The imported answers are in the response cache: another --out is answered from it.
        assert main(command(server, inp, tmp_path / "again.jsonl", tmp_path / "cache")) == EXIT_OK
        assert server.count == 0
    assert {r["id"]: comparable(r) for r in read(out)} == expected
    assert all(r["details"]["cached"] for r in read(tmp_path / "again.jsonl"))


def test_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = write_samples(tmp_path / "in.jsonl", 1)
    base = ["score", "--method", "fleur", "--input", str(inp), "--images", str(IMAGES), "--out", str(tmp_path / "o.jsonl"), "--quiet"]
    assert main([*base, "--backend", "scripted:0.5", "--batch"]) == EXIT_USAGE
    assert "openai:, azure: or openai-compatible:" in capsys.readouterr().err
    assert main([*base, "--backend", "openai-compatible:http://127.0.0.1:9/v1#m", "--wait"]) == EXIT_USAGE
    assert main([*base, "--backend", "openai-compatible:http://127.0.0.1:9/v1#m", "--batch", "--max-cost", "1"]) == EXIT_USAGE
    assert main([*base, "--backend", "openai-compatible:http://127.0.0.1:9/v1#m", "--batch-import", str(tmp_path / "missing.jsonl")]) == EXIT_USAGE
    assert main(["batch", "status", str(tmp_path / "nothing.jsonl")]) == EXIT_USAGE
    assert main([*base, "--backend", "openai-compatible:http://127.0.0.1:9/v1#m", "--batch", "--ray"]) == EXIT_USAGE
    assert "without --ray" in capsys.readouterr().err


def test_state_of_another_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = write_samples(tmp_path / "in.jsonl", 2)
    out = tmp_path / "b.jsonl"
    with running_server(batch_delay=30.0) as server:
        assert main(command(server, inp, out, tmp_path / "cache", "--batch")) == EXIT_SUBMITTED
        assert main(command(server, inp, out, tmp_path / "cache", "--batch", method="vanilla")) == EXIT_USAGE
        assert "holds the batches of another run" in capsys.readouterr().err
        assert main(command(server, inp, out, tmp_path / "cache")) == EXIT_USAGE  # online: would ask them again
        assert "has a batch run in progress" in capsys.readouterr().err
        assert len(server.batches) == 1 and chat_calls(server) == 0


def test_requests_larger_than_a_batch_go_online_or_fail(tmp_path: Path) -> None:
    inp = write_samples(tmp_path / "in.jsonl", 2)
    with running_server() as server:
        out = tmp_path / "online.jsonl"
        argv = command(server, inp, out, tmp_path / "cache", "--batch", "--batch-max-bytes", "1024", "--batch-failed", "online")
        assert main(argv) == EXIT_OK  # every request (an image as a data: URL) is larger than 1 KiB
        assert not server.batches and chat_calls(server) == 2
        assert all(r["status"] == "ok" for r in read(out))
        out = tmp_path / "errors.jsonl"
        argv = command(server, inp, out, tmp_path / "cache2", "--batch", "--batch-max-bytes", "1024")
        assert main(argv) == EXIT_ALL_FAILED  # every line failed: no sample succeeded
        assert not server.batches and chat_calls(server) == 2
        assert all(r["status"] == "error" and "more than one batch may hold" in r["error"] for r in read(out))


@pytest.mark.parametrize("server_kw", [{"refuse_logprobs": True}, {"max_top_logprobs": 5}])
def test_logprob_refusals_are_learned_as_online(tmp_path: Path, server_kw: dict[str, Any]) -> None:
    """A server that refuses logprobs (or more than 5 top_logprobs) in batch lines: the lines are
    asked again without them (or with 5), as the online backend does, and records match online."""
    inp = write_samples(tmp_path / "in.jsonl", 3)
    expected = {r["id"]: comparable(r) for r in online_records(inp, tmp_path, **server_kw)}
    out = tmp_path / "b.jsonl"
    with running_server(**server_kw) as server:
        argv = command(server, inp, out, tmp_path / "cache", "--batch", "--wait", "--poll-interval", "0.05", "--batch-attempts", "1")
        assert main(argv) == EXIT_OK
        assert len(server.batches) == 2 and chat_calls(server) == 0
    assert {r["id"]: comparable(r) for r in read(out)} == expected


@pytest.mark.parametrize(("method", "cache"), [("fleur", False), ("vanilla-code", True)])
def test_answers_the_cache_does_not_keep(tmp_path: Path, method: str, cache: bool) -> None:
    """--no-cache, and a sampled method (temperature 0.2, never cached): the run's own store keeps
    the batch answers until the final pass has written them."""
    inp = write_samples(tmp_path / "in.jsonl", 4)
    expected = {r["id"]: comparable(r) for r in online_records(inp, tmp_path, method=method)}
    out = tmp_path / "b.jsonl"
    with running_server(batch_delay=0.2) as server:
        extra = ["--batch", "--wait", "--poll-interval", "0.05"] + ([] if cache else ["--no-cache"])
        assert main(command(server, inp, out, tmp_path / "cache", *extra, method=method)) == EXIT_OK
        assert len(server.batches) == 1 and chat_calls(server) == 0
    assert {r["id"]: comparable(r) for r in read(out)} == expected
    if cache:
        from capjudge.backends.cache import ResponseCache

        assert len(ResponseCache(tmp_path / "cache")) == 0  # sampled answers are not cached


def test_a_server_without_batch_endpoints_is_a_clear_backend_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = write_samples(tmp_path / "in.jsonl", 2)
    out = tmp_path / "b.jsonl"
    with running_server() as server:
        argv = command(server, inp, out, tmp_path / "cache", "--batch")
        argv[argv.index("--backend") + 1] = f"openai-compatible:{server.endpoint}#gpt-4o"  # no /v1: every route 404s
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "files/batches call failed" in err and "HTTP 404" in err and "run the same command again" in err
        assert state_paths(out)[0].exists()  # kept: the next run carries on


def test_a_request_that_cannot_be_built_gets_the_online_error(tmp_path: Path) -> None:
    """gpt-4 reads no images: the request fails before it is sent, online and in batch mode alike."""
    inp = write_samples(tmp_path / "in.jsonl", 2)
    with running_server() as server:
        online, batch = tmp_path / "online.jsonl", tmp_path / "batch.jsonl"
        argv = command(server, inp, online, tmp_path / "c1", "--no-cache")
        argv[argv.index("--backend") + 1] = f"openai-compatible:{server.base_url}#gpt-4"
        assert main(argv) == EXIT_ALL_FAILED  # every request failed: no sample succeeded
        argv = command(server, inp, batch, tmp_path / "c2", "--batch")
        argv[argv.index("--backend") + 1] = f"openai-compatible:{server.base_url}#gpt-4"
        assert main(argv) == EXIT_ALL_FAILED
        assert server.count == 0 and not server.batches
    assert [r["error"] for r in read(batch)] == [r["error"] for r in read(online)]
    assert all("reads no images" in r["error"] and r["details"]["resumable"] is False for r in read(batch))


def test_a_server_refusing_the_penalty_fields_is_asked_again_without(tmp_path: Path) -> None:
    """As online: the neutral penalty fields (sent to OpenAI-compatible servers) are dropped for the
    rest of the run when the server refuses them, and the refused lines are asked again."""
    from openai_fake_server import Reply, default_responder, error_body

    def responder(r: Received) -> Reply:
        if "repetition_penalty" in r.body:
            return Reply(status=400, body=error_body("Unrecognized request argument supplied: repetition_penalty"))
        return default_responder(r)

    inp = write_samples(tmp_path / "in.jsonl", 3)
    # Online at concurrency 1: requests in flight when the first refusal arrives fail (the online
    # backend drops the fields for the requests sent after it, not for those already answered).
    expected = {r["id"]: comparable(r) for r in online_records(inp, tmp_path, extra=("--concurrency", "1"), responder=responder)}
    out = tmp_path / "b.jsonl"
    with running_server(responder=responder) as server:
        argv = command(server, inp, out, tmp_path / "cache", "--batch", "--wait", "--poll-interval", "0.05", "--batch-attempts", "1")
        assert main(argv) == EXIT_OK
        assert len(server.batches) == 2 and chat_calls(server) == 0
    assert {r["id"]: comparable(r) for r in read(out)} == expected


def _detailed_answers(req: Received) -> Any:
    from openai_fake_server import Reply, chat_body

    text = req.prompt_text()
    if "Propositions:" in text:  # CapMAS factuality, step 2: the verdicts
        return Reply(body=chat_body("1. True\n2. False\n3. True"))
    if "candidate" in text.lower():  # CLAIR
        return Reply(body=chat_body('{"score": 70, "reason": "close"}'))
    return Reply(body=chat_body("1. There is a cat.\n2. The cat sleeps.\n3. It is day."))  # step 1: the propositions


@pytest.mark.parametrize(("method", "lines"), [("clair", [4]), ("capmas-factuality", [4, 2])])
def test_step_methods_run_in_rounds(method: str, lines: list[int], tmp_path: Path) -> None:
    """A method of steps per caption (CapMAS: decompose, then verify) runs one batch per step, and its
    records equal an online run's."""
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"s{i}", "image": ("cats.jpg", "dog.jpg")[i % 2], "caption": f"A cat. It sleeps {i}.", "references": ["a cat on a bed"]}) + "\n" for i in range(4)))
    expected = {r["id"]: comparable(r) for r in online_records(inp, tmp_path, method=method, responder=_detailed_answers)}
    assert all(r["status"] == "ok" for r in expected.values())
    out = tmp_path / "b.jsonl"
    with running_server(responder=_detailed_answers) as server:
        assert main(command(server, inp, out, tmp_path / "cache", "--batch", "--wait", "--poll-interval", "0.05", method=method)) == EXIT_OK
        assert chat_calls(server) == 0
        # One batch per step. The served decomposition is the same for every caption, so the
        # verifications of one image (same propositions, reference and image) are one line.
        assert [b["request_counts"]["total"] for b in server.batches.values()] == lines
    assert {r["id"]: comparable(r) for r in read(out)} == expected
