"""Issue 20, files: outputs replace only what capjudge wrote (9), one run at a time on an --out
(10), files follow the umask (11), the response cache stores data and never unpickles (12)."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from capjudge.cli import main
from openai_fake_server import running_server

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IMAGES = EXAMPLES / "images"
CAPTIONS = EXAMPLES / "captions.jsonl"
PAIRS = EXAMPLES / "pairs.jsonl"
N_CAPTIONS = sum(1 for line in CAPTIONS.read_text().splitlines() if line.strip())


def score(out: Path, *extra: str, backend: str = "scripted:The score is 73 out of 100.") -> list[str]:
    return ["score", "--method", "vanilla", "--backend", backend, "--images", str(IMAGES), "--input", str(CAPTIONS), "--out", str(out), "--quiet", *extra]


def compare(out: Path, *extra: str) -> list[str]:
    return ["compare", "--backend", "scripted:Answer 1", "--images", str(IMAGES), "--input", str(PAIRS), "--out", str(out), "--no-cache", "--quiet", *extra]


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- 9. an output replaces only a file capjudge wrote for the same command --------------------------
@pytest.mark.parametrize("overwrite", [False, True])
def test_out_that_is_not_a_results_file_is_refused_and_kept(tmp_path: Path, capsys, overwrite: bool) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes, not results\n")
    rc = main(score(notes, "--no-cache", *(["--overwrite"] if overwrite else [])))
    assert rc == 2
    err = capsys.readouterr().err
    assert "notes.txt" in err and "is not a capjudge results file" in err and "line 1 is not a JSON record" in err
    assert "Choose another path, or delete the file" in err
    assert notes.read_text() == "my notes, not results\n"


def test_out_of_other_json_lines_is_refused(tmp_path: Path, capsys) -> None:
    data = tmp_path / "data.jsonl"  # JSON lines, but samples, not records
    data.write_text(json.dumps({"image": "cats.jpg", "caption": "two cats"}) + "\n")
    assert main(score(data, "--no-cache", "--overwrite")) == 2
    assert "has no field(s) score, status, method, backend" in capsys.readouterr().err
    assert records(data) == [{"image": "cats.jpg", "caption": "two cats"}]


def test_results_of_the_other_command_are_refused_even_with_overwrite(tmp_path: Path, capsys) -> None:
    pairs_out = tmp_path / "pairs.jsonl"
    assert main(compare(pairs_out)) == 0
    before = pairs_out.read_text()
    assert main(score(pairs_out, "--no-cache", "--overwrite")) == 2
    assert "is a pair record, not a score record" in capsys.readouterr().err
    assert pairs_out.read_text() == before
    scores = tmp_path / "scores.jsonl"
    assert main(score(scores, "--no-cache")) == 0
    assert main(compare(scores, "--overwrite")) == 2
    assert "is a score record, not a pair record" in capsys.readouterr().err


def test_rerun_on_its_own_out_empty_out_and_a_killed_runs_last_line_still_work(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    out.write_text("")  # an empty file is fine
    assert main(score(out, "--no-cache")) == 0
    first = records(out)
    assert main(score(out, "--no-cache")) == 0  # a re-run keeps its records
    assert records(out) == first
    assert main(score(out, "--no-cache", "--overwrite")) == 0  # --overwrite starts its own file over
    # A run killed mid-write leaves a cut last line (no newline): still this command's file.
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    assert main(score(out, "--no-cache")) == 0
    assert [r["status"] for r in records(out)] == ["ok"] * len(first)
    pairs_out = tmp_path / "p.jsonl"
    assert main(compare(pairs_out)) == 0 and main(compare(pairs_out)) == 0


def test_html_that_is_an_input_or_not_a_capjudge_report_is_refused(tmp_path: Path, capsys) -> None:
    template = tmp_path / "mine.j2"
    template.write_text("Rate the caption {{ caption }} from 0 to 100.\n")
    out = tmp_path / "r.jsonl"
    rc = main(score(out, "--no-cache", "--template-file", str(template), "--html", str(template)))
    assert rc == 2
    assert "mine.j2" in capsys.readouterr().err
    assert template.read_text() == "Rate the caption {{ caption }} from 0 to 100.\n"
    page = tmp_path / "index.html"
    page.write_text("<!DOCTYPE html><html><head><title>my page</title></head></html>\n")
    assert main(score(out, "--no-cache", "--html", str(page))) == 2
    assert "is not an HTML report written by capjudge" in capsys.readouterr().err
    assert "my page" in page.read_text()
    # A report capjudge wrote is replaced by the next run (and `capjudge html`), as before.
    report = tmp_path / "report.html"
    assert main(score(out, "--no-cache", "--html", str(report))) == 0
    assert main(score(out, "--no-cache", "--html", str(report))) == 0
    assert main(["html", str(out), "-o", str(report)]) == 0
    capsys.readouterr()
    assert main(["html", str(out), "-o", str(page)]) == 2
    assert "is not an HTML report written by capjudge" in capsys.readouterr().err
    assert "my page" in page.read_text()


def test_prices_file_is_an_input(tmp_path: Path, capsys) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"m": {"input": 1.0, "output": 2.0}}))
    rc = main(score(tmp_path / "r.jsonl", "--no-cache", "--prices", str(prices), "--html", str(prices), backend="openai-compatible:http://127.0.0.1:9/v1#m"))
    assert rc == 2
    assert "prices.json" in capsys.readouterr().err and json.loads(prices.read_text())["m"]["input"] == 1.0


def test_replace_refusal_rules(tmp_path: Path) -> None:
    from capjudge.run.outguard import replace_refusal

    p = tmp_path / "f"
    assert replace_refusal(p, "score") is None  # missing
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    assert replace_refusal(p, "score") is not None and replace_refusal(p, "html") is not None
    rec = {"image": "a.jpg", "caption": "c", "score": 1.0, "status": "ok", "method": "m", "backend": "b"}
    p.write_text(json.dumps(rec) + "\nnot json\n" + json.dumps(rec) + "\n")
    assert replace_refusal(p, "score") == "line 2 is not a JSON record"
    p.write_text("one line of notes without a newline")
    assert replace_refusal(p, "score") == "line 1 is not a JSON record"
    p.write_text(json.dumps(rec) + "\n")
    assert replace_refusal(p, "score") is None and replace_refusal(p, "pair") is not None
    p.write_text('<!DOCTYPE html>\n<html><head><meta name="generator" content="capjudge 0.1">')
    assert replace_refusal(p, "html") is None


# -- 10. one run at a time on an --out -------------------------------------------------------------
@contextmanager
def holder_run(out: Path, base_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real `capjudge score` in another process, held up by a slow server, until killed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OPENAI_API_KEY": "sk-test"}
    cmd = [sys.executable, "-m", "capjudge.cli", *score(out, "--no-cache", "--backend-opt", "max_retries=0", backend=f"openai-compatible:{base_url}#m")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        lock = out.with_name(out.name + ".lock")
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().strip() == str(proc.pid)):
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.05)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        if proc.stderr:
            proc.stderr.close()


def test_a_second_run_on_the_same_out_exits_2_naming_the_holder(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.jsonl"
    with running_server(delay=20.0) as srv, holder_run(out, srv.base_url) as proc:
        rc = main(score(out, "--no-cache", "--method", "fleur", backend="scripted:0.5"))
        assert rc == 2
        err = capsys.readouterr().err
        assert f"pid {proc.pid}" in err and "in use by another capjudge run" in err
        assert proc.poll() is None  # the first run goes on
        assert not out.exists() or records(out) == []  # and nothing of the second run went into its file
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        lock = out.with_name(out.name + ".lock")
        assert lock.read_text().strip() == str(proc.pid)  # left behind by the killed run ...
        # ... and taken over at once by the next run, which removes it when done.
        assert main(score(out, "--no-cache")) == 0
        assert [r["status"] for r in records(out)] == ["ok"] * N_CAPTIONS
        assert not lock.exists()


def test_a_lock_file_naming_a_live_process_but_not_locked_does_not_block(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    lock = out.with_name(out.name + ".lock")
    lock.write_text(f"{os.getppid()}\n")  # a live pid, but nobody holds the lock
    assert main(score(out, "--no-cache")) == 0
    assert len(records(out)) == N_CAPTIONS and not lock.exists()


def test_out_lock_in_one_process_refuses_a_second_holder(tmp_path: Path) -> None:
    from capjudge.run.outlock import OutLocked, out_lock
    from capjudge.run.preflight import PreflightError

    out = tmp_path / "r.jsonl"
    with out_lock(out) as lock:
        assert lock.read_text().strip() == str(os.getpid())
        with pytest.raises(OutLocked, match=f"pid {os.getpid()}"), out_lock(out):
            pass
        assert issubclass(OutLocked, PreflightError)
    with out_lock(out):  # released: taken again
        pass


# -- 11. files follow the umask --------------------------------------------------------------------
@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_results_file_and_report_follow_the_umask(tmp_path: Path, mask: int, mode: int) -> None:
    out = tmp_path / "r.jsonl"
    report = tmp_path / "r.html"
    with umask(mask):
        assert main(score(out, "--no-cache", "--html", str(report))) == 0
    assert out.stat().st_mode & 0o777 == mode
    assert report.stat().st_mode & 0o777 == mode


def test_write_atomically_keeps_an_existing_files_mode(tmp_path: Path) -> None:
    from capjudge.data.io import current_umask, write_atomically

    p = tmp_path / "state.json"
    with umask(0o027):
        assert current_umask() == 0o027
        write_atomically(p, lambda fh: fh.write("{}"))
        assert p.stat().st_mode & 0o777 == 0o640
        p.chmod(0o604)
        write_atomically(p, lambda fh: fh.write("{}"))
    assert p.stat().st_mode & 0o777 == 0o604 and p.read_text() == "{}"


# -- 12. the cache stores data and never unpickles -------------------------------------------------
class Planted:
    """Unpickling it creates a file: the proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (self.marker, "w"))


def plant(cache_dir: Path, keys: list[str], marker: Path) -> None:
    import diskcache

    raw = diskcache.Cache(str(cache_dir))  # diskcache's default serializer: pickles
    try:
        for key in keys:
            raw.set(key, Planted(marker))
    finally:
        raw.close()


def cache_keys(cache_dir: Path) -> list[str]:
    with sqlite3.connect(cache_dir / "cache.db") as db:
        return [k for (k,) in db.execute("SELECT key FROM Cache")]


def test_planted_pickles_in_the_cache_never_run_and_the_run_still_scores(tmp_path: Path, caplog) -> None:
    cache = tmp_path / "cache"
    out = tmp_path / "r.jsonl"
    marker = tmp_path / "PWNED"
    assert main(score(out, "--cache-dir", str(cache))) == 0
    keys = cache_keys(cache)
    assert len(keys) == N_CAPTIONS
    plant(cache, [*keys, "any other key"], marker)  # under the real keys and under another one
    with caplog.at_level("WARNING", logger="capjudge.backends.cache"):
        assert main(score(out, "--cache-dir", str(cache), "--overwrite")) == 0
    assert not marker.exists()
    recs = records(out)
    assert [r["status"] for r in recs] == ["ok"] * N_CAPTIONS and [r["score"] for r in recs] == [73.0] * N_CAPTIONS
    assert not any(r["details"].get("cached") for r in recs)  # planted entries are misses ...
    assert any("was not read" in m and "pickle" in m for m in caplog.messages)  # ... logged
    assert main(score(out, "--cache-dir", str(cache), "--overwrite")) == 0  # ... and replaced
    assert all(r["details"]["cached"] for r in records(out))
    assert main(["cache", "stats", "--cache-dir", str(cache)]) == 0
    assert not marker.exists()


def test_cache_entries_are_json_and_value_files_outside_the_folder_are_not_read(tmp_path: Path) -> None:
    from capjudge.backends.base import Completion, TokenStep, Usage
    from capjudge.backends.cache import ResponseCache

    cache = ResponseCache(tmp_path / "c")
    steps = [TokenStep("0", -0.1, (("0", -0.1), ("1", -2.5))), TokenStep(".", -0.5, ((".", -0.5), ("x", float("-inf"))), (float("-inf"),) + (math.log(0.05),) * 9)]  # -inf: probability 0, kept
    answer = Completion(text="0.8", steps=steps, logprobs=True, model="m", usage=Usage(5, 2), finish_reason="stop", meta={"x": [1, 2]})
    cache.set("k", answer)
    cache.set("big", Completion(text="y" * 100_000, model="m"))  # large: a value file
    got = cache.get("k")
    assert got is not None and got.steps == answer.steps and got.usage == answer.usage and got.meta == {"x": [1, 2]}
    assert cache.get("big") is not None
    with sqlite3.connect(tmp_path / "c" / "cache.db") as db:
        value, mode = db.execute("SELECT value, mode FROM Cache WHERE key = 'k'").fetchone()
        assert json.loads(bytes(value))["completion"]["text"] == "0.8"
        secret = tmp_path / "secret.json"
        secret.write_text(json.dumps({"v": 2, "completion": {"text": "from outside"}}))
        db.execute("UPDATE Cache SET mode = 2, filename = ?, value = NULL WHERE key = 'k'", (str(secret),))
    assert cache.get("k") is None  # not read
    cache.set("k", answer)  # replacing it removes no file outside the folder
    assert secret.exists() and cache.get("k") is not None
    cache.close()


def test_batch_run_store_never_unpickles(tmp_path: Path) -> None:
    from capjudge.backends.base import Completion
    from capjudge.backends.openai.batch_store import RunStore

    store = RunStore(tmp_path / "store")
    store.put(answers=[("k1", Completion(text="0.5", model="m"))], errors=[("k2", {"message": "bad", "status": 400})], online=["k3"], tries=[("k4", "job1")])
    assert store.answer("k1") is not None and store.error("k2") is not None and store.online("k3") and store.tried("k4") == ["job1"]
    store.close()
    marker = tmp_path / "PWNED"
    import diskcache

    raw = diskcache.Cache(str(tmp_path / "store"))
    raw.set("a:k1", Planted(marker))
    raw.set("e:k2", Planted(marker))
    raw.set(Planted(marker), 1)  # a pickled key
    raw.close()
    store = RunStore(tmp_path / "store")
    assert store.answer("k1") is None and store.error("k2") is None
    assert store.count_answers() == 1  # "a:k1"; listing the keys unpickles none (the pickled key is skipped)
    store.close()
    assert not marker.exists()


def test_explain_and_arena_out_that_is_not_their_results_is_refused(tmp_path: Path, capsys) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me\n")
    rc = main(["explain", "--backend", "scripted:0.6", "--images", str(IMAGES), "--input", str(CAPTIONS), "--out", str(notes), "--no-cache", "--json"])
    assert rc == 2 and "is not a capjudge results file of scores" in capsys.readouterr().err
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    rows = [json.loads(line) for line in CAPTIONS.read_text().splitlines() if line.strip()][:2]
    a.write_text("".join(json.dumps(r) + "\n" for r in rows))
    b.write_text("".join(json.dumps({**r, "caption": r["caption"] + " indeed"}) + "\n" for r in rows))
    scores = tmp_path / "scores.jsonl"
    assert main(score(scores, "--no-cache")) == 0
    for out in (notes, scores):
        before = out.read_text()
        rc = main(["arena", "--models", f"a={a}", f"b={b}", "--round-robin", "--backend", "scripted:Answer 1", "--images", str(IMAGES), "--out", str(out), "--no-cache", "--quiet", "--overwrite"])
        assert rc == 2 and "is not a capjudge results file of pair verdicts" in capsys.readouterr().err
        assert out.read_text() == before
