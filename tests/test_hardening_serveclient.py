"""A client trusts no server (issue 30 items 8 and 15, issue 29 items 4 and 10): ``--remote``,
``RemoteJudge`` and ``make_reward(remote=)`` against a hostile server on 127.0.0.1.

- Every record received is checked as a local one is: a score that is not a finite number on the
  method's scale, a null score, an unknown status, a record that is no object, another row's id,
  another judge's method, too few or too many records: that row's resumable error record (exit 3),
  never an ``ok`` record or a reward, never a crash.
- ``timeout`` bounds a request as a whole (a trickling server), ``max_response_bytes`` its answer
  (read as it streams in; an announced length beyond it is refused at once).
- A token with white space at either end, or other than printable ASCII, is refused at the start
  by the server and the client (exit 2 / ``ValueError``), the message never showing it.
- The client waits for a server still starting (``--remote-wait``, ``wait=``); ``serve
  --ready-file`` says when it listens; SIGTERM ends a server with exit 0 whether it is serving
  or still loading its judge.
- ``RemoteJudge.reward`` means what ``make_reward`` means: ``[0, 1]`` unless ``normalize=False``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from capjudge.cli import main
from capjudge.serve import RemoteJudge
from capjudge.serve.client import RemoteError
from capjudge.serve.server import free_port
from serve_helpers import ANSWER, EXAMPLES, IMAGES, serving
from serve_hostile import (
    Hostile,
    hostile_server,
    json_bytes,
    pair_record,
    pairwise_info,
    record,
    streaming,
)

SRC = Path(__file__).resolve().parents[1] / "src"
TOKEN = "client-test-token-0123456789"


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rows(n: int) -> list[dict[str, Any]]:
    return [{"id": f"r{k}", "image": "cats.jpg", "caption": f"cats {k}"} for k in range(n)]


# -- item 8: every record checked as a local one ------------------------------------------------------
BAD = {
    "huge": {"score": 1e9},
    "negative": {"score": -5},
    "nan": {"score": math.nan},
    "inf": {"score": math.inf},
    "null": {"score": None},
    "text": {"score": "85"},
    "bool": {"score": True},
    "status": {"status": "maybe"},
    "scale": {"scale": [0, 1e12], "score": 1e9},
    "method": {"method": "fleur"},
    "template": {"template_hash": "0" * 16},
}


def answer_by_case(sent: list[dict[str, Any]], state: Hostile) -> Any:
    """Each row's record broken as its caption says (``BAD``), ``other-id`` names the next row's id,
    ``not-object`` is a list; other rows get their good record."""
    out: list[Any] = []
    for k, row in enumerate(sent):
        case = row["caption"]
        if case == "other-id":
            out.append(record(state.info, row, id=sent[(k + 1) % len(sent)]["id"]))
        elif case == "not-object":
            out.append([row["id"], 85.0])
        else:
            out.append(record(state.info, row, **BAD.get(case, {})))
    return json_bytes({"results": out})


def test_records_that_break_the_rules_are_error_records_never_ok() -> None:
    cases = [*BAD, "other-id", "not-object", "good"]
    samples = [{"id": f"s{k}", "image": "cats.jpg", "caption": case} for k, case in enumerate(cases)]
    with hostile_server(answer_by_case) as (url, _), RemoteJudge(url, images_root=IMAGES, batch_size=len(samples)) as judge:
        results = list(judge.score_many(samples))
        rewards = judge.reward(["huge", "good"], ["cats.jpg", "cats.jpg"])
    by_case = dict(zip(cases, results))
    assert by_case["good"].ok and by_case["good"].score == 85.0
    for case in [*BAD, "other-id", "not-object"]:
        r = by_case[case]
        assert r.status == "error" and r.score is None, (case, r)
        assert r.details.get("resumable") is True and "cannot be kept" in (r.error or ""), (case, r.error)
    assert [r.id for r in results] == [s["id"] for s in samples]  # each row keeps its own id
    assert "outside the method's scale" in (by_case["huge"].error or "")
    assert "not a finite number" in (by_case["nan"].error or "")
    assert "names id 's" in (by_case["other-id"].error or "")
    assert "not the served judge's" in (by_case["method"].error or "")
    # A reward never comes from a record that breaks the rules (the reward of "huge" is its caption's record).
    assert rewards == [None, 0.85]


def test_score_remote_writes_no_ok_record_of_a_bad_one_and_exits_3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAPJUDGE_TOKEN", raising=False)
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"s{k}", "image": "cats.jpg", "caption": case}) + "\n" for k, case in enumerate(["huge", "nan", "good"])))
    out = tmp_path / "out.jsonl"
    with hostile_server(answer_by_case) as (url, _):
        rc = main(["score", "--remote", url, "--images", str(IMAGES), "--input", str(inp), "--out", str(out), "--quiet"])
    recs = read_jsonl(out)
    assert [r["id"] for r in recs] == ["s0", "s1", "s2"]
    assert [r["status"] for r in recs] == ["error", "error", "ok"]
    assert rc == 3  # rows failed for the server's sake: a re-run asks them again


def test_pair_records_that_break_the_rules_are_error_records() -> None:
    cases = {"no-verdict": {"verdict": None}, "bad-verdict": {"verdict": "C"}, "nan-scores": {"scores": [math.nan, 1.0]}, "mode": {"mode": "grading"}, "good": {}}

    def answer(sent: list[dict[str, Any]], state: Hostile) -> Any:
        return json_bytes({"results": [pair_record(state.info, row, **cases[row["caption_a"]]) for row in sent]})

    pairs = [{"id": f"p{k}", "image": "cats.jpg", "caption_a": case, "caption_b": "a dog"} for k, case in enumerate(cases)]
    with hostile_server(answer, info=pairwise_info()) as (url, _), RemoteJudge(url, images_root=IMAGES) as judge:
        results = dict(zip(cases, judge.compare_many(pairs)))
    assert results["good"].ok and results["good"].verdict == "A"
    for case in ("no-verdict", "bad-verdict", "nan-scores", "mode"):
        assert results[case].status == "error" and results[case].verdict is None and results[case].details.get("resumable") is True, (case, results[case])


@pytest.mark.parametrize("extra", [-1, 1, 2], ids=["a-row-missing", "one-too-many", "two-too-many"])
def test_a_wrong_number_of_records_fails_every_row_of_the_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: int) -> None:
    monkeypatch.delenv("CAPJUDGE_TOKEN", raising=False)

    def answer(sent: list[dict[str, Any]], state: Hostile) -> Any:
        recs = [record(state.info, row) for row in sent]
        recs = recs[:extra] if extra < 0 else recs + [record(state.info, sent[0]) for _ in range(extra)]
        return json_bytes({"results": recs})

    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows(3)))
    out = tmp_path / "out.jsonl"
    with hostile_server(answer) as (url, _):
        rc = main(["score", "--remote", url, "--images", str(IMAGES), "--input", str(inp), "--out", str(out), "--quiet"])
    recs = read_jsonl(out)
    assert [r["id"] for r in recs] == ["r0", "r1", "r2"]  # no row silently dropped
    assert all(r["status"] == "error" and "record(s) for the 3 row(s)" in r["error"] for r in recs)
    assert rc == 3


def test_answers_that_are_not_results_lists_fail_their_rows() -> None:
    answers = iter([json_bytes({"results": {"not": "a list"}}), json_bytes([1, 2]), json_bytes({"results": ["x"]})])
    with hostile_server(lambda sent, state: next(answers)) as (url, _), RemoteJudge(url, images_root=IMAGES, concurrency=1) as judge:
        for _ in range(3):
            (r,) = judge.score_many(rows(1))
            assert r.status == "error" and r.details.get("resumable") is True, r


def test_timeout_bounds_the_whole_request_of_a_trickling_server() -> None:
    with hostile_server(lambda sent, state: streaming(state.trickle(0.2))) as (url, _), RemoteJudge(url, images_root=IMAGES, timeout=1.5) as judge:
        t0 = time.monotonic()
        (r,) = judge.score_many(rows(1))
        wall = time.monotonic() - t0
    assert wall < 8, f"a request of timeout=1.5 s lasted {wall:.1f} s"
    assert r.status == "error" and "within timeout=1.5 s (the whole request)" in (r.error or ""), r.error


def test_an_oversize_answer_is_refused_as_it_streams_in_and_an_announced_one_at_once() -> None:
    with hostile_server(lambda sent, state: streaming(state.endless())) as (url, _), RemoteJudge(url, images_root=IMAGES, max_response_bytes=1024 * 1024) as judge:
        (r,) = judge.score_many(rows(1))
    assert r.status == "error" and "max_response_bytes=1,048,576" in (r.error or ""), r.error
    with hostile_server(lambda sent, state: streaming(state.stall(), {"content-length": str(10**10)})) as (url, _), RemoteJudge(url, images_root=IMAGES, timeout=30) as judge:
        t0 = time.monotonic()
        (r,) = judge.score_many(rows(1))
        wall = time.monotonic() - t0
    assert "it announced 10,000,000,000 bytes" in (r.error or ""), r.error
    assert wall < 10


# -- item 15: tokens a request cannot carry ----------------------------------------------------------
@pytest.mark.parametrize("token", [" spaced-token-1234 ", "tab-token-1234\t", "tök-token-1234"], ids=["spaces", "tab", "non-ascii"])
def test_a_token_no_request_can_carry_is_refused_at_the_start(token: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(ValueError) as caught:
        RemoteJudge("http://127.0.0.1:9", token=token, wait=0)
    assert token.strip() not in str(caught.value)
    monkeypatch.setenv("CAPJUDGE_TOKEN", token)
    out = tmp_path / "o.jsonl"
    assert main(["score", "--remote", "http://127.0.0.1:9", "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--remote-wait", "0"]) == 2
    assert main(["serve", "--method", "vanilla", "--backend", "scripted:1", "--port", "0"]) == 2
    monkeypatch.delenv("CAPJUDGE_TOKEN")
    assert main(["serve", "--method", "vanilla", "--backend", "scripted:1", "--port", "0", "--token", token]) == 2
    err = capsys.readouterr().err
    assert token.strip() not in err and "token" in err
    from capjudge.serve.app import ServeSettings, create_app

    with pytest.raises(ValueError) as caught:
        create_app(object(), ServeSettings(token=token), {})
    assert token.strip() not in str(caught.value)


# -- issue 29 item 4: a server still starting; --ready-file; SIGTERM ---------------------------------
def test_the_client_waits_for_a_server_still_starting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CAPJUDGE_TOKEN", raising=False)
    out = tmp_path / "out.jsonl"
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows(2)))
    with hostile_server(lambda sent, state: state.records(sent), port=free_port(), delay=1.5) as (url, _):
        rc = main(["score", "--remote", url, "--remote-wait", "60", "--images", str(IMAGES), "--input", str(inp), "--out", str(out), "--quiet"])
        assert rc == 0 and [r["status"] for r in read_jsonl(out)] == ["ok", "ok"]
    assert "waiting for the judge server at" in capsys.readouterr().err  # said once while it waits
    with hostile_server(lambda sent, state: state.records(sent), port=free_port(), delay=1.0) as (url, _), RemoteJudge(url, images_root=IMAGES, wait=60) as judge:
        assert [r.status for r in judge.score_many(rows(1))] == ["ok"]
    # Nobody there: a clear error after the wait, naming it.
    t0 = time.monotonic()
    with pytest.raises(RemoteError, match=r"cannot be reached.*waited 0.5 s"):
        RemoteJudge(f"http://127.0.0.1:{free_port()}", wait=0.5)
    assert time.monotonic() - t0 < 10


SERVER_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from capjudge.serve import served

    class SlowJudge(served.ServedJudge):
        def __init__(self, *args, **kwargs):
            marker = os.environ.get("SLOW_JUDGE_MARKER")
            if marker:  # the judge is being built (a model loading): SIGTERM now
                Path(marker).write_text("loading")
                time.sleep(60)
            super().__init__(*args, **kwargs)

    served.ServedJudge = SlowJudge
    from capjudge.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def _server(tmp_path: Path, *args: str, marker: Path | None = None) -> subprocess.Popen[bytes]:
    script = tmp_path / "serve_script.py"
    script.write_text(SERVER_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    env.pop("CAPJUDGE_TOKEN", None)
    if marker is not None:
        env["SLOW_JUDGE_MARKER"] = str(marker)
    return subprocess.Popen([sys.executable, str(script), "serve", "--method", "vanilla", "--no-cache", *args], env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "server.err").open("w"))


def _wait_for(path: Path, proc: subprocess.Popen[bytes], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{path.name} never came: {(path.parent / 'server.err').read_text()}")
        time.sleep(0.05)


def test_ready_file_says_when_the_server_listens_and_sigterm_exits_0(tmp_path: Path) -> None:
    ready = tmp_path / "judge.ready"
    ready.write_text("stale: an old run's")  # never taken for this server's
    proc = _server(tmp_path, "--backend", f"scripted:{ANSWER}", "--port", "0", "--ready-file", str(ready))
    try:
        deadline = time.monotonic() + 120
        while not (ready.exists() and ready.read_text().startswith("http://")):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "server.err").read_text()
            time.sleep(0.05)
        url = ready.read_text().strip()
        assert httpx.get(f"{url}/health", timeout=5).json() == {"status": "ok"}  # listening when the file came (--port 0: its port)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0  # docs/serve.md: SIGTERM exits 0
        assert not ready.exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_sigterm_while_the_judge_loads_exits_0(tmp_path: Path) -> None:
    marker = tmp_path / "loading"
    proc = _server(tmp_path, "--backend", f"scripted:{ANSWER}", "--port", str(free_port()), marker=marker)
    try:
        _wait_for(marker, proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0  # not 143 (-15): killed by the signal before it listened
    finally:
        if proc.poll() is None:
            proc.kill()


# -- issue 29 item 10: one meaning of a reward -------------------------------------------------------
def test_remote_reward_is_on_0_1_as_make_reward_unless_normalize_is_off() -> None:
    from capjudge.reward import make_reward

    with serving(token=TOKEN) as srv, RemoteJudge(srv.url, token=TOKEN, images_root=IMAGES) as judge:
        assert judge.reward(["two cats", ""], ["cats.jpg", "dog.jpg"]) == [0.85, None]
        assert judge.reward(["two cats"], ["cats.jpg"], normalize=False) == [85.0]
        reward = make_reward(judge=judge)
        assert reward(prompts=["p"], completions=["two cats"], image=["cats.jpg"]) == judge.reward(["two cats"], ["cats.jpg"])


def test_the_reward_of_a_thread_pool_call_keeps_order() -> None:
    # reward() goes through score_many: requests of batch_size rows, answers put back in order.
    with serving(lambda request: ANSWER) as srv, RemoteJudge(srv.url, images_root=IMAGES, batch_size=2, concurrency=3) as judge:
        got = judge.reward([f"c{k}" if k % 3 else "" for k in range(7)], ["cats.jpg"] * 7)
    assert got == [None if k % 3 == 0 else 0.85 for k in range(7)]
