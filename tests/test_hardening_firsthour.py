"""The first hour with capjudge (issue 20, items 15-16): an unreachable hub fails in seconds with
what to do, library noise stays out of the way, and every summary says why."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# The hub client retried a refused connection for ~49 s before failing; the probe answers in 5 s at
# most. The bound leaves room for importing torch on a loaded machine.
FAIL_FAST_SECONDS = 25.0


def _cli_env(tmp_path: Path, endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(PYTHONPATH=str(ROOT / "src"), HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf-home"), NO_COLOR="1")
    env.pop("HF_HUB_CACHE", None)
    env.pop("HUGGINGFACE_HUB_CACHE", None)
    return env


def _run_cli(args: list[str], env: dict[str, str], timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "capjudge.cli", *args], capture_output=True, text=True, env=env, timeout=timeout)
    return proc, time.monotonic() - start


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A server that accepts connections and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    srv.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(srv.getsockname()[1])
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    srv.close()


def _score_args(tmp_path: Path, backend: str) -> list[str]:
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"image": "cats.jpg", "caption": "two cats"}) + "\n")
    return ["score", "--method", "vanilla", "--backend", backend, "--images", str(EXAMPLES / "images"), "--input", str(inp), "--out", str(tmp_path / "out.jsonl"), "--no-cache"]


def _assert_offline_failure(proc: subprocess.CompletedProcess[str], seconds: float, endpoint: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert seconds < FAIL_FAST_SECONDS, f"took {seconds:.1f} s"
    err = proc.stderr
    assert err.count("cannot be reached") == 1, err
    assert endpoint in err and "hf download someone/some-model" in err and "HF_HUB_OFFLINE=1" in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == len(set(lines)), f"a line printed twice:\n{err}"
    assert "Retrying in" not in err


def test_unreachable_hub_closed_port_fails_fast_with_the_offline_hint(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    proc, seconds = _run_cli(_score_args(tmp_path, "hf:someone/some-model"), _cli_env(tmp_path, endpoint))
    _assert_offline_failure(proc, seconds, endpoint)


def test_unreachable_hub_silent_server_fails_fast_with_the_offline_hint(tmp_path: Path, silent_server: int) -> None:
    pytest.importorskip("transformers")
    endpoint = f"http://127.0.0.1:{silent_server}"
    proc, seconds = _run_cli(_score_args(tmp_path, "hf:someone/some-model"), _cli_env(tmp_path, endpoint))
    _assert_offline_failure(proc, seconds, endpoint)
    assert "no answer within" in proc.stderr


def test_unreachable_hub_reads_a_cached_model_and_says_so_once(tmp_path: Path, tiny_llava_dir: Path) -> None:
    """A model already in the HF cache loads from it when the hub is down: one warning line."""
    repo = tmp_path / "hf-home" / "hub" / "models--someone--tiny-llava"
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(tiny_llava_dir, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    proc, seconds = _run_cli(_score_args(tmp_path, "hf:someone/tiny-llava"), _cli_env(tmp_path, endpoint))
    assert proc.returncode == 0, proc.stderr
    assert seconds < 120
    assert proc.stderr.count("cannot be reached") == 1, proc.stderr
    assert "reading 'someone/tiny-llava' from the local HF cache only" in proc.stderr
    assert "Retrying in" not in proc.stderr
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(records) == 1 and records[0]["status"] in ("ok", "error")  # a random model: any answer


def test_hf_run_prints_no_future_warning_without_verbose(tmp_path: Path, tiny_llava_dir: Path) -> None:
    env = _cli_env(tmp_path, f"http://127.0.0.1:{_closed_port()}")
    env["HF_HUB_OFFLINE"] = "1"
    # Several captions of one image: the prefix-reuse path, where transformers warned about past_key_values.
    args = ["score", "--method", "fleur", "--backend", f"hf:{tiny_llava_dir}", "--images", str(EXAMPLES / "images"),
            "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(tmp_path / "out.jsonl"), "--no-cache"]
    proc, _ = _run_cli(args, env)
    assert proc.returncode == 0, proc.stderr
    assert "FutureWarning" not in proc.stderr and "DeprecationWarning" not in proc.stderr, proc.stderr


def test_library_deprecations_are_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    from capjudge.backends.hf.quiet import is_library_deprecation, quiet_libraries

    quiet_libraries()
    inside = os.path.join("site-packages", "transformers", "utils", "generic.py")
    assert is_library_deprecation(FutureWarning, inside)
    assert not is_library_deprecation(UserWarning, inside)
    assert not is_library_deprecation(FutureWarning, os.path.join("site-packages", "pandas", "core.py"))
    with caplog.at_level(logging.INFO, logger="capjudge.backends.hf"):
        warnings.showwarning("`past_key_values` is deprecated", FutureWarning, inside, 1036)
    assert any("past_key_values" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)


def test_hub_logger_prints_through_the_root_handler_only(tmp_path: Path) -> None:
    """As in the CLI: a root handler, capjudge's routing before huggingface_hub is imported, then a
    hub warning: one line, not two."""
    pytest.importorskip("huggingface_hub")
    code = (
        "import logging, sys\n"
        "logging.getLogger().addHandler(logging.StreamHandler(sys.stderr))\n"
        "from capjudge.backends.hf.quiet import quiet_libraries\n"
        "quiet_libraries()\n"
        "import huggingface_hub\n"
        "from huggingface_hub.utils import logging as hub_logging\n"
        "hub_logging.get_logger('huggingface_hub.utils._http').warning('Retrying in 1s [Retry 1/5].')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_cli_env(tmp_path, "http://127.0.0.1:9"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("Retrying in 1s") == 1, proc.stderr


# ------------------------------------------------------------------ item 16: every summary says why
def test_parity_tolerance_prints_the_tolerance_the_largest_difference_and_tells_the_backends_apart(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    args = ["parity", "--a", "scripted:x", "--a-opt", "text=0.8", "--b", "scripted:x", "--b-opt", "text=0.7", "--method", "fleur",
            "--input", str(EXAMPLES / "captions.jsonl"), "--images", str(EXAMPLES / "images"), "--tolerance", "0.01"]
    assert main(args) == 5
    cap = capsys.readouterr()
    assert "--tolerance 0.01" in cap.err and "largest score difference 0.1" in cap.err, cap.err
    assert "scripted:x [text=0.8]" in cap.out and "scripted:x [text=0.7]" in cap.out, cap.out
    assert main([*args, "--format", "json"]) == 5
    cap = capsys.readouterr()
    out = json.loads(cap.out.strip().splitlines()[-1])
    assert out["tolerance"] == 0.01 and out["outside_tolerance"] == ["largest score difference 0.1 (sample ex1) > tolerance 0.01"]
    assert main([*args[:-1], "0.5"]) == 0
    assert "within --tolerance 0.5" in capsys.readouterr().err


def test_parity_labels_mask_secret_options_and_say_when_both_are_the_same() -> None:
    from capjudge.cli.parity import backend_labels

    a, b = backend_labels("openai-compatible:http://h/v1#m", "openai-compatible:http://h/v1#m", {"api_key": "sk-verysecret123"}, {})
    assert "sk-verysecret123" not in a and "api_key=***" in a and "api_key unset" in b
    a, b = backend_labels("scripted:x", "scripted:x", {}, {})
    assert a == "scripted:x (same as b)" and b == "scripted:x (same as a)"


def _pair_file(path: Path, verdicts: str) -> Path:
    names = {"A": "A", "B": "B", "t": "tie"}
    rows = [{"id": f"p{i}", "image": f"img{i}.jpg", "caption_a": f"first {i}", "caption_b": f"second {i}", "verdict": names[v],
             "votes": [names[v], names[v]], "method": "gpt4v-pairwise", "backend": "scripted:x", "status": "ok", "error": None}
            for i, v in enumerate(verdicts)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_agree_says_why_kappa_is_undefined(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    pa, pb = _pair_file(tmp_path / "pa.jsonl", "tttttt"), _pair_file(tmp_path / "pb.jsonl", "tttttt")
    assert main(["agree", str(pa), str(pb)]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "- (one verdict only; see the note)" in text
    assert "both judges gave 'tie' to all 6 samples" in text
    assert main(["agree", str(pa), str(pb), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["cohen_kappa"] is None and out["undefined"]["cohen_kappa"].startswith("one verdict only")


def test_kappa_undefined_reasons() -> None:
    import numpy as np

    from capjudge.metaeval.agree_stats import kappa_undefined_reason

    assert kappa_undefined_reason(np.zeros((3, 3), dtype=int)).startswith("no overlap")
    one = np.zeros((3, 3), dtype=int)
    one[0, 0] = 4
    assert "'A' to all 4 samples" in kappa_undefined_reason(one)
    one[1, 1] = 1
    assert kappa_undefined_reason(one) is None


def test_arena_counts_ties_apart_from_battles_with_a_winner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    argv = ["arena", "--input", str(EXAMPLES / "arena.jsonl"), "--round-robin", "--images", str(EXAMPLES / "images"),
            "--backend", "scripted:Answer 1", "--out", str(tmp_path / "battles.jsonl"), "--no-cache", "--bootstrap", "10"]
    assert main(argv) == 0  # "Answer 1" in both orders: every battle a tie
    text = " ".join(capsys.readouterr().out.split())
    assert "won / tied / failed │ 0 / 18 / 0" in text, text
    assert main([*argv, "--format", "json"]) == 0
    battles = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["battles"]
    assert battles["won"] == 0 and battles["ties"] == 18 and battles["decided"] == 18


def test_choose_one_names_the_causes_of_its_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    groups = tmp_path / "groups.jsonl"
    rows = [{"id": "g1", "image": "cats.jpg", "true": ["two cats lying together"], "flawed": ["three dogs", "a car"]},
            {"id": "g2", "image": "cats.jpg", "true": ["two cats on a blanket"], "flawed": ["a red bus"]},
            {"id": "g3", "image": "missing.jpg", "true": ["two cats"], "flawed": ["a red bus"]}]
    groups.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = ["choose-one", "--method", "vanilla", "--backend", "scripted:no idea", "--input", str(groups), "--images", str(EXAMPLES / "images"),
            "--no-cache", "--out-json", str(tmp_path / "report.json")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "3 group(s) not ranked" in out
    assert "- 5 x no score in the answer (no number): 'no idea'" in out
    assert "- 2 x image 'missing.jpg' not found" in out
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["n_errors"] == 3 and list(report["error_causes"].values()) == [5, 2]
    assert all("causes" not in o for o in report["outcomes"])


def test_demo_report_says_its_model_is_random(tiny_llava_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    monkeypatch.setenv("CAPJUDGE_HOME", str(tmp_path / "home"))
    assert main(["demo", "--out-dir", str(tmp_path / "demo")]) == 0
    capsys.readouterr()
    page = (tmp_path / "demo" / "report.html").read_text()
    assert page.count('class="page-warning"') == 1  # one per random model, naming every results file it judged
    assert all(f in page.split('class="page-warning"', 1)[1].split("</", 1)[0] for f in ("fleur.jsonl", "visce2.jsonl", "pairs-grading.jsonl"))
    assert "RANDOM MODEL" in page and "MEANINGLESS" in page
    assert page.index("RANDOM MODEL") < page.index("<h1>")  # first thing on the page
    # capjudge html on the demo's results says it too; a real model's results do not.
    assert main(["html", str(tmp_path / "demo" / "fleur.jsonl"), "-o", str(tmp_path / "fleur.html")]) == 0
    assert "RANDOM MODEL" in (tmp_path / "fleur.html").read_text()
    real = tmp_path / "real.jsonl"
    rec = json.loads((tmp_path / "demo" / "fleur.jsonl").read_text().splitlines()[0])
    rec.update(model="llava-hf/llava-1.5-7b-hf", backend="hf:llava-hf/llava-1.5-7b-hf")
    real.write_text(json.dumps(rec) + "\n")
    assert main(["html", str(real), "-o", str(tmp_path / "real.html")]) == 0
    assert "RANDOM MODEL" not in (tmp_path / "real.html").read_text()


def _help_examples() -> list[list[str]]:
    import shlex

    from capjudge.cli import EXAMPLES_HELP

    joined = EXAMPLES_HELP.replace("\\\n", " ")
    return [shlex.split(line.strip(), comments=True)[1:] for line in joined.splitlines()[1:] if line.strip()]


def test_top_level_help_lists_examples_and_arena_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import build_parser, main

    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "examples (" in text and "capjudge arena --input examples/arena.jsonl" in text
    assert "exit codes (score, compare, arena, explain, run-benchmark)" in text
    examples = _help_examples()
    assert len(examples) >= 6
    parser = build_parser()
    for argv in examples:  # every example is a valid command line
        assert parser.parse_args(argv).command == argv[0]


def test_the_scripted_help_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    argv = next(a for a in _help_examples() if a[0] == "score" and any(x.startswith("scripted:") for x in a))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(EXAMPLES)
    assert main(argv) == 0
    assert json.loads((tmp_path / "out" / "try.jsonl").read_text().splitlines()[0])["score"] == 85.0


def test_judge_score_takes_an_image_and_a_caption() -> None:
    from capjudge import Judge, Sample

    r = Judge("fleur", "scripted:0.8", images_root=EXAMPLES / "images").score("cats.jpg", "two cats")
    assert r.ok and r.score == 0.8 and r.caption == "two cats"
    judge = Judge("ref-fleur", "scripted:0.8", images_root=EXAMPLES / "images")
    r = judge.score("cats.jpg", "two cats", ["two cats sleeping"], id="x")
    assert r.ok and r.id == "x" and list(r.references) == ["two cats sleeping"]
    # the forms that worked before still do
    assert judge.score(Sample("cats.jpg", "two cats", references=("two cats sleeping",))).score == 0.8
    assert judge.score({"image": "cats.jpg", "caption": "two cats", "references": ["a"]}).score == 0.8
    assert judge.score("cats.jpg").status == "error"  # no caption: an error record, as before
    with pytest.raises(TypeError, match="not both"):
        judge.score(Sample("cats.jpg", "two cats"), "another caption")


# ------------------------------------------------------------------ item 17: fidelity details
def test_pairwise_methods_send_the_method_option_temperature(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main
    from openai_fake_server import Reply, chat_body, running_server

    with running_server(responder=lambda req: Reply(body=chat_body("Answer 1"))) as srv:
        argv = ["compare", "--method", "gpt4v-pairwise", "--backend", f"openai-compatible:{srv.base_url}#fake-model", "--images", str(EXAMPLES / "images"),
                "--input", str(EXAMPLES / "pairs.jsonl"), "--out", str(tmp_path / "pairs.jsonl"), "--no-cache", "--quiet", "--method-option", "temperature=0.7"]
        assert main(argv) == 0, capsys.readouterr().err
        bodies = [r.body for r in srv.received if r.body and "messages" in r.body]
    assert len(bodies) == 4  # two pairs, both orders
    assert {b.get("temperature") for b in bodies} == {0.7}


def test_listwise_sends_the_method_option_temperature() -> None:
    from capjudge import Judge, Sample
    from capjudge.backends.scripted import ScriptedBackend

    backend = ScriptedBackend("1. 0.9\n2. 0.1")
    judge = Judge("listwise", backend, images_root=EXAMPLES / "images", method_options={"temperature": "0.5"})
    list(judge.score_many([Sample("cats.jpg", "two cats"), Sample("cats.jpg", "a dog")]))
    assert backend.calls and {c.config.temperature for c in backend.calls} == {0.5}


def test_offline_hint_masks_credentials_in_the_endpoint(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    endpoint = f"http://alice:hunter2secret@127.0.0.1:{_closed_port()}"
    proc, _ = _run_cli(_score_args(tmp_path, "hf:someone/some-model"), _cli_env(tmp_path, endpoint), timeout=120)
    assert proc.returncode == 1 and "cannot be reached" in proc.stderr, proc.stderr
    assert "hunter2secret" not in proc.stderr and "http://***@127.0.0.1:" in proc.stderr


def test_agree_says_why_fleiss_kappa_is_undefined(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from capjudge.cli import main

    files = [str(_pair_file(tmp_path / f"p{k}.jsonl", "AAAA")) for k in range(3)]
    assert main(["agree", *files]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Fleiss' kappa is undefined (one verdict only: every judge gave 'A' to all 4 samples" in text
    assert main(["agree", *files, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["fleiss_kappa"] is None and out["undefined"]["fleiss_kappa"].startswith("one verdict only")
