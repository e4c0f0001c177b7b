"""``capjudge serve`` as a process, and its clients: ``score|compare --remote`` write the results file
a local run writes (scripted and tiny HF), resume, SIGTERM finishes requests in flight, no token in
any log line."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from capjudge.cli import main
from capjudge.serve import RemoteJudge
from capjudge.serve.served import ServedJudge
from capjudge.serve.server import free_port
from serve_helpers import ANSWER, EXAMPLES, IMAGES, auth, serving

TOKEN = "remote-test-token-9876543210"
SRC = Path(__file__).resolve().parents[1] / "src"

# A server process whose "slow:SECONDS" backend answers every request after SECONDS.
SERVER_SCRIPT = textwrap.dedent(
    f"""
    import sys, time
    from capjudge.backends.registry import register_backend
    from capjudge.backends.scripted import ScriptedBackend

    def slow(spec, **options):
        def answer(request):
            time.sleep(float(spec.target))
            return {ANSWER!r}
        return ScriptedBackend(answer, model="slow")

    register_backend("slow", slow)
    from capjudge.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


class ServerProcess:
    """``capjudge serve`` in a process of its own on a free port of 127.0.0.1."""

    def __init__(self, tmp: Path, *args: str, token: str | None = TOKEN) -> None:
        script = tmp / "serve_script.py"
        script.write_text(SERVER_SCRIPT)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
        env.pop("CAPJUDGE_TOKEN", None)
        if token is not None:
            env["CAPJUDGE_TOKEN"] = token
        self.err_path = tmp / "server.err"
        self.err = self.err_path.open("w")
        self.proc = subprocess.Popen([sys.executable, str(script), *args, "--port", str(self.port)], env=env, stdout=self.err, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start: {self.err_path.read_text()}")
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Signal the server and wait for it to exit: its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(60)
        finally:
            self.err.close()
        return code

    def log(self) -> str:
        return self.err_path.read_text()


@pytest.fixture()
def scripted_server(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(tmp_path, "-vv", "serve", "--method", "vanilla", "--backend", f"scripted:{ANSWER}", "--images", str(IMAGES), "--no-cache")
    try:
        yield server
    finally:
        server.stop()


def _score(*args: str, verbose: bool = False) -> int:
    return main([*(["-vv"] if verbose else []), "score", "--images", str(IMAGES), "--input", str(EXAMPLES / "captions.jsonl"), "--quiet", *args])


def test_score_remote_writes_what_a_local_run_writes_and_resumes(scripted_server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CAPJUDGE_TOKEN", TOKEN)
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    assert _score("--method", "vanilla", "--backend", f"scripted:{ANSWER}", "--no-cache", "--out", str(local)) == 0
    # Half first, then the rest: the second run keeps the first half (resume) and asks the others.
    assert _score("--remote", scripted_server.url, "--out", str(remote), "--limit", "3", "--batch-size", "2", verbose=True) == 0
    assert len(remote.read_text().splitlines()) == 3
    assert main(["-vv", "score", "--remote", scripted_server.url, "--images", str(IMAGES), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(remote), "--html", str(tmp_path / "r.html")]) == 0
    assert remote.read_bytes() == local.read_bytes()
    out = capsys.readouterr()
    assert "3 record(s) kept from the results file" in out.out
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>") or "<html" in (tmp_path / "r.html").read_text()
    assert TOKEN not in out.out + out.err
    # Without the token the server refuses (a usage error naming the variable), and so does a wrong one.
    monkeypatch.setenv("CAPJUDGE_TOKEN", "wrong-token-wrong-token")
    assert _score("--remote", scripted_server.url, "--out", str(tmp_path / "x.jsonl")) == 2
    assert "CAPJUDGE_TOKEN" in capsys.readouterr().err
    # The server logged requests (-vv) and never the token.
    assert scripted_server.stop() == 0
    log = scripted_server.log()
    assert "POST /v1/score" in log and TOKEN not in log


def test_remote_refuses_the_options_that_choose_the_judge(scripted_server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CAPJUDGE_TOKEN", TOKEN)
    out = str(tmp_path / "o.jsonl")
    assert _score("--remote", scripted_server.url, "--backend", "scripted:x", "--out", out) == 2
    assert "--backend cannot be given" in capsys.readouterr().err.replace("\n", " ")
    assert _score("--remote", scripted_server.url, "--method", "fleur", "--out", out) == 2
    assert "serves 'vanilla'" in capsys.readouterr().err
    assert _score("--out", out, "--method", "vanilla") == 2  # neither --backend nor --remote
    assert "--backend" in capsys.readouterr().err
    # A panel or the thinking switch chooses the judge too.
    assert _score("--remote", scripted_server.url, "--backend", "scripted:1", "--backend", "scripted:2", "--out", out) == 2
    assert "--backend" in capsys.readouterr().err
    panel = tmp_path / "panel.json"
    panel.write_text('[{"backend": "scripted:1"}, {"backend": "scripted:2"}]')
    assert _score("--remote", scripted_server.url, "--panel", str(panel), "--out", out) == 2
    assert "--panel cannot be given" in capsys.readouterr().err.replace("\n", " ")
    assert _score("--remote", scripted_server.url, "--thinking", "off", "--out", out) == 2
    assert "--thinking cannot be given" in capsys.readouterr().err.replace("\n", " ")
    dead = f"http://127.0.0.1:{free_port()}"
    assert _score("--remote", dead, "--out", out, "--remote-wait", "0") == 1
    assert "cannot be reached" in capsys.readouterr().err


def test_compare_remote_writes_what_a_local_run_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = "scripted:Caption A is better. [[A]]"
    monkeypatch.setenv("CAPJUDGE_TOKEN", TOKEN)
    pairs = ["--images", str(IMAGES), "--input", str(EXAMPLES / "pairs.jsonl"), "--quiet"]
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    assert main(["compare", "--backend", spec, "--no-cache", "--out", str(local), *pairs]) == 0
    with serving(judge=ServedJudge("gpt4v-pairwise", spec, images_root=IMAGES), token=TOKEN) as srv:
        assert main(["compare", "--remote", srv.url, "--out", str(remote), *pairs]) == 0
    assert remote.read_bytes() == local.read_bytes()


def test_a_failing_server_gives_resumable_error_records_and_a_rerun_completes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CAPJUDGE_TOKEN", raising=False)
    spec = f"scripted:{ANSWER}"
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    assert _score("--method", "vanilla", "--backend", spec, "--no-cache", "--out", str(local)) == 0

    class Broken(ServedJudge):
        def score_stream(self, samples: Any) -> Any:
            raise RuntimeError("the model fell over")

    with serving(judge=Broken("vanilla", spec, images_root=IMAGES)) as srv:
        assert _score("--remote", srv.url, "--out", str(remote)) == 3
    err = capsys.readouterr().err
    assert "failed for backend reasons" in err
    assert all('"resumable": true' in line and "the model fell over" in line for line in remote.read_text().splitlines())
    with serving(judge=ServedJudge("vanilla", spec, images_root=IMAGES)) as srv:
        assert _score("--remote", srv.url, "--out", str(remote), "--retry-errors") == 0
    assert remote.read_bytes() == local.read_bytes()


def test_images_the_client_cannot_read_give_the_local_runs_error_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corrupt_image: Path) -> None:
    monkeypatch.delenv("CAPJUDGE_TOKEN", raising=False)
    images = tmp_path / "imgs"
    images.mkdir()
    (images / "cats.jpg").write_bytes((IMAGES / "cats.jpg").read_bytes())
    (images / "corrupt.jpg").write_bytes(corrupt_image.read_bytes())
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "\n".join(
            [
                '{"id": "a", "image": "cats.jpg", "caption": "two cats"}',
                '{"id": "b", "image": "corrupt.jpg", "caption": "two cats"}',
                '{"id": "c", "image": "missing.jpg", "caption": "two cats"}',
                '{"id": "d", "image": "../outside.jpg", "caption": "two cats"}',
                '{"image": "cats.jpg", "caption": ""}',
                "not json",
            ]
        )
        + "\n"
    )
    spec = f"scripted:{ANSWER}"
    args = ["--images", str(images), "--input", str(rows), "--quiet"]
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    assert main(["score", "--method", "vanilla", "--backend", spec, "--no-cache", "--out", str(local), *args]) == 0
    # The server has no --images of its own: every image travels in the request.
    with serving(judge=ServedJudge("vanilla", spec, images_root=None)) as srv:
        assert main(["score", "--remote", srv.url, "--out", str(remote), *args]) == 0
    assert remote.read_bytes() == local.read_bytes()
    assert len(local.read_text().splitlines()) == 6


def test_remote_judge_in_python_and_reward() -> None:
    with serving(token=TOKEN) as srv:
        with RemoteJudge(srv.url, token=TOKEN, images_root=IMAGES, batch_size=2) as judge:
            results = list(judge.score_many([{"image": "cats.jpg", "caption": f"cats {k}"} for k in range(5)]))
            assert [r.id for r in results] == [str(k) for k in range(5)] and {r.score for r in results} == {85.0}
            assert judge.reward(["two cats", ""], ["cats.jpg", "dog.jpg"]) == [0.85, None]  # as make_reward: [0, 1]
            assert repr(judge).startswith("RemoteJudge(")
        with pytest.raises(Exception, match="CAPJUDGE_TOKEN"):
            RemoteJudge(srv.url, token="not-the-token-at-all")


def test_sigterm_answers_every_request_in_flight_and_exits_0(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, "serve", "--method", "vanilla", "--backend", "slow:1.0", "--images", str(IMAGES), "--no-cache", "--max-wait-ms", "0", "--max-batch", "1")
    try:
        with ThreadPoolExecutor(4) as pool:
            sent = [pool.submit(httpx.post, f"{server.url}/v1/score", headers=auth(TOKEN), json={"samples": [{"id": f"s{k}", "image": "cats.jpg", "caption": "cats"}]}, timeout=120) for k in range(4)]
            deadline = time.monotonic() + 60
            while True:  # all four received: one judged, three queued
                metrics = httpx.get(f"{server.url}/metrics", headers=auth(TOKEN)).text
                line = next(x for x in metrics.splitlines() if x.startswith("capjudge_in_flight_requests "))
                if float(line.split()[1]) >= 4 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            server.proc.send_signal(signal.SIGTERM)
            answers = [f.result() for f in sent]
        assert [a.status_code for a in answers] == [200] * 4
        assert all(a.json()["results"][0]["status"] == "ok" for a in answers)
        assert server.proc.wait(60) == 0
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.hf
def test_score_remote_on_the_tiny_hf_judge_writes_what_a_local_run_writes(tiny_llava_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAPJUDGE_TOKEN", raising=False)
    spec = f"hf:{tiny_llava_dir}?device=cpu"
    local, remote = tmp_path / "local.jsonl", tmp_path / "remote.jsonl"
    assert _score("--method", "fleur", "--backend", spec, "--no-cache", "--out", str(local)) == 0
    with serving(judge=ServedJudge("fleur", spec, images_root=IMAGES)) as srv:
        assert _score("--remote", srv.url, "--out", str(remote)) == 0
    assert remote.read_bytes() == local.read_bytes()


def test_make_reward_remote_asks_the_served_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    """`make_reward(remote=URL)`: TRL's call through `capjudge serve`, the same rewards as a local
    reward of the same judge; a bad image is None; a method other than the served one is refused."""
    from capjudge.reward import make_async_reward, make_reward

    monkeypatch.setenv("CAPJUDGE_TOKEN", TOKEN)
    call = {"prompts": ["Describe."] * 3, "completions": ["two cats on a bed", "a dog", "cats"], "image": ["cats.jpg", "dog.jpg", "missing.jpg"], "trainer_state": None}
    local = make_reward("vanilla", f"scripted:{ANSWER}", images_root=IMAGES)
    want = local(**call)
    assert want == [0.85, 0.85, None]
    with serving(token=TOKEN) as srv:
        reward = make_reward(remote=srv.url, images_root=IMAGES)
        assert reward(**call) == want
        assert reward.__name__ == "capjudge_vanilla"
        reward.close()
        areward = make_async_reward(remote=srv.url, images_root=IMAGES)
        assert asyncio.run(areward(**call)) == want
        areward.close()
        with pytest.raises(ValueError, match="serves 'vanilla', not 'fleur'"):
            make_reward("fleur", remote=srv.url)
        with pytest.raises(ValueError, match="remote= is a judge server"):
            make_reward(backend="scripted:1", remote=srv.url)
