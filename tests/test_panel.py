"""Panels of judges through their public interface: ``capjudge.Panel`` in Python, ``--backend``
given several times and ``--panel FILE`` on ``score``, ``compare`` and ``arena``.

Judges are scripted backends with known answers, so every aggregate, majority, agreement and
per-judge leaderboard is checked against numbers worked out by hand; one judge is an API backend
on the fake OpenAI server (127.0.0.1) whose URL carries a password that must be written nowhere.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

import capjudge
from capjudge import Judge, Panel, Sample
from capjudge.arena import run_arena
from capjudge.backends.base import Request
from capjudge.backends.registry import BackendSpec, register_backend
from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli import main
from capjudge.judges.panel import member_records
from capjudge.metaeval.stats import kendall_tau_b
from openai_fake_server import running_server

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
IMAGES = EXAMPLES / "images"
CATS = str(IMAGES / "cats.jpg")


def prompt_of(req: Request) -> str:
    return "\n".join(m.content for m in req.messages)


def digest(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest(), 16) % 100


# Captions of examples/arena.jsonl -> their model, for judges that prefer models in a fixed order.
MODEL_OF = {" ".join(r["caption"].split()): r["model"] for r in map(json.loads, (EXAMPLES / "arena.jsonl").read_text().splitlines())}
SHOWN = re.compile(r"^Answer 1: (.*)\nAnswer 2: (.*)$", re.M)


def preferring(order: list[str]) -> Any:
    """A pairwise judge that prefers the caption of the model earlier in ``order`` (both orders)."""

    def respond(req: Request) -> str:
        m = SHOWN.search(prompt_of(req))
        assert m is not None
        first, second = (MODEL_OF[" ".join(c.split())] for c in m.groups())
        return "Answer 1" if order.index(first) < order.index(second) else "Answer 2"

    return respond


def _test_kind(spec: BackendSpec, **options: Any) -> ScriptedBackend:
    """``panel-test:up`` / ``down`` (a 0-100 score from the prompt's digest, or 100 minus it),
    ``panel-test:prefer-human-swap-repeat`` (pairwise, by model)."""
    how = spec.target
    if how.startswith("prefer-"):
        respond = preferring(how[len("prefer-") :].split("-"))
    else:

        def respond(req: Request) -> str:
            d = digest(prompt_of(req))
            return f"The score is {d if how == 'up' else 100 - d}."

    backend = ScriptedBackend(respond, model=f"panel-test-{how}", **options)
    backend.spec = spec.raw
    return backend


register_backend("panel-test", _test_kind)


def scripted(answer: Any, model: str, method: str = "vanilla") -> Judge:
    return Judge(method, ScriptedBackend(answer, model=model), images_root=IMAGES)


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# ------------------------------------------------------------------------------------ Python
def test_scores_are_aggregated_by_mean_and_median_and_each_judge_is_kept() -> None:
    answers = [("I would rate it 80 out of 100.", "a"), ("60", "b"), ("The score is 10.", "c")]
    mean = Panel([scripted(t, m) for t, m in answers])
    median = Panel([scripted(t, m) for t, m in answers], aggregate="median")
    r_mean, r_median = mean.score(CATS, "two cats"), median.score(CATS, "two cats")
    assert r_mean.ok and r_mean.score == pytest.approx((80 + 60 + 10) / 3)
    assert r_median.ok and r_median.score == 60.0
    assert r_mean.backend == "panel:mean(scripted:a, scripted:b, scripted:c)"
    assert r_median.backend == "panel:median(scripted:a, scripted:b, scripted:c)"
    entries = r_mean.details["panel"]
    assert [(e["name"], e["backend"], e["score"], e["raw"], e["status"]) for e in entries] == [
        ("scripted:a", "scripted:a", 80.0, "I would rate it 80 out of 100.", "ok"),
        ("scripted:b", "scripted:b", 60.0, "60", "ok"),
        ("scripted:c", "scripted:c", 10.0, "The score is 10.", "ok"),
    ]
    assert r_mean.method == "vanilla" and r_mean.scale == (0.0, 100.0)
    # Each judge's own records come back out of the panel's, ready for capjudge.agree.
    members = member_records([r_mean])
    assert {name: [r["score"] for r in recs] for name, recs in members.items()} == {"scripted:a": [80.0], "scripted:b": [60.0], "scripted:c": [10.0]}


def test_a_judge_failing_on_a_sample_is_recorded_and_left_out() -> None:
    def fails_on_dogs(req: Request) -> str:
        if "dog" in prompt_of(req):
            raise RuntimeError("server said no")
        return "90"

    panel = Panel([scripted("30", "a"), scripted("60", "b"), scripted(fails_on_dogs, "c")])
    res = list(panel.score_many([Sample("cats.jpg", "two cats", id="s1"), Sample("dog.jpg", "a dog", id="s2")]))
    assert [r.id for r in res] == ["s1", "s2"]
    assert res[0].ok and res[0].score == pytest.approx(60.0)  # (30 + 60 + 90) / 3
    assert res[1].ok and res[1].score == pytest.approx(45.0)  # (30 + 60) / 2: the failed judge left out
    failed = res[1].details["panel"][2]
    assert failed["status"] == "error" and "server said no" in failed["error"] and failed["score"] is None
    assert res[1].details["panel_ok"] == 2 and res[1].details["panel_size"] == 3


def test_under_the_quorum_the_record_is_an_error_naming_each_failed_judge() -> None:
    def broken(req: Request) -> str:
        raise RuntimeError("model crashed")

    all_failed = Panel([scripted(broken, "a"), scripted(broken, "b")]).score(CATS, "two cats")
    assert not all_failed.ok and all_failed.score is None
    assert "0 of 2 judges answered" in (all_failed.error or "")
    assert "scripted:a: " in (all_failed.error or "") and "scripted:b: " in (all_failed.error or "")
    assert [e["status"] for e in all_failed.details["panel"]] == ["error", "error"]
    # Two of three answered: the default quorum (more than half) holds; quorum=3 does not.
    judges = [scripted("40", "a"), scripted("50", "b"), scripted(broken, "c")]
    assert Panel(judges).score(CATS, "x").score == 45.0
    strict = Panel([scripted("40", "a"), scripted("50", "b"), scripted(broken, "c")], quorum=3)
    rec = strict.score(CATS, "x")
    assert not rec.ok and "quorum is 3" in (rec.error or "")
    assert strict.backend_spec == "panel:mean:quorum=3(scripted:a, scripted:b, scripted:c)"


def test_pair_verdicts_go_by_majority_and_a_split_is_a_stated_tie() -> None:
    captions = ("an orange cat and a grey cat are lying together.", "an orange dog and a grey cat are lying together.")  # human, swap
    human_first = preferring(["human", "swap", "repeat"])
    swap_first = preferring(["swap", "human", "repeat"])

    def judge(fn: Any, model: str) -> Judge:
        return scripted(fn, model, method="gpt4v-pairwise")

    majority = Panel([judge(human_first, "a"), judge(human_first, "b"), judge(swap_first, "c")]).compare(CATS, *captions)
    assert majority.ok and majority.verdict == "A" and majority.details["panel_tie"] is False
    assert majority.details["panel_votes"] == {"A": 2, "B": 1, "tie": 0}
    assert [e["verdict"] for e in majority.details["panel"]] == ["A", "A", "B"]
    assert [e["votes"] for e in majority.details["panel"]] == [["A", "A"], ["A", "A"], ["B", "B"]]
    split = Panel([judge(human_first, "a"), judge(swap_first, "b")]).compare(CATS, *captions)
    assert split.ok and split.verdict == "tie" and split.details["panel_tie"] is True
    # A judge that says "Tie" is a vote for tie: A, B and tie one each is a stated tie too.
    three = Panel([judge(human_first, "a"), judge(swap_first, "b"), judge("Tie", "c")]).compare(CATS, *captions)
    assert three.verdict == "tie" and three.details["panel_tie"] is True and three.details["panel_votes"] == {"A": 1, "B": 1, "tie": 1}


def test_judges_of_different_methods_or_too_few_are_refused() -> None:
    with pytest.raises(ValueError, match="same method"):
        Panel([scripted("50", "a"), scripted("0.5", "b", method="fleur")])
    with pytest.raises(ValueError, match="two or more"):
        Panel([scripted("50", "a")])
    with pytest.raises(ValueError, match="aggregate"):
        Panel([scripted("50", "a"), scripted("60", "b")], aggregate="mode")  # type: ignore[arg-type]
    # Specs are built with the method given.
    panel = Panel(["scripted:The score is 20.", {"backend": "scripted:The score is 40.", "name": "forty"}], method="vanilla", images_root=IMAGES)
    assert panel.names == ["scripted:The score is 20.", "forty"] and panel.score("cats.jpg", "two cats").score == 30.0


def test_arena_with_a_panel_gives_each_judges_leaderboard_and_their_rank_correlation() -> None:
    rows: dict[str, list[dict[str, Any]]] = {}
    for r in map(json.loads, (EXAMPLES / "arena.jsonl").read_text().splitlines()):
        rows.setdefault(r["model"], []).append({"id": r["id"], "image": r["image"], "caption": r["caption"]})
    orders = {"X": ["human", "swap", "repeat"], "Y": ["repeat", "swap", "human"], "Z": ["human", "repeat", "swap"]}
    panel = Panel([scripted(preferring(o), n, method="gpt4v-pairwise") for n, o in orders.items()], names=list(orders))
    res = run_arena(rows, judge=panel, round_robin=True, bootstrap=0)
    d = res.to_dict()
    # Each judge ranks the models in its own order; by majority the panel's order is Z's
    # (human beats swap 2-1 and repeat 2-1, repeat beats swap 2-1).
    for name, order in orders.items():
        board = d["leaderboards_by_judge"][name]
        assert [e["model"] for e in board] == order
        # Round robin on 6 images: 12 battles each; the first model wins all, the second half.
        assert [e["win_rate"] for e in board] == [1.0, 0.5, 0.0] and [e["battles"] for e in board] == [12, 12, 12]
    assert [e["model"] for e in d["leaderboard"]] == ["human", "repeat", "swap"]
    # Kendall tau-b between rankings (x100), by hand: X-Y all 3 model pairs discordant; X-Z one
    # of 3 (swap / repeat); Y-Z two of 3.
    taus = {(p["a"], p["b"]): p["kendall_tau_b"] for p in d["rank_correlation"]["pairs"]}
    assert taus[("X", "Y")] == pytest.approx(-100.0)
    assert taus[("X", "Z")] == pytest.approx(100.0 / 3)
    assert taus[("Y", "Z")] == pytest.approx(-100.0 / 3)
    assert {p["judge"]: p["kendall_tau_b"] for p in d["rank_correlation"]["with_panel"]} == pytest.approx({"X": 100.0 / 3, "Y": -100.0 / 3, "Z": 100.0})
    assert all(p["models"] == 3 for p in d["rank_correlation"]["pairs"])


def test_an_arena_of_one_judge_has_no_panel_part() -> None:
    rows = {m: [{"image": "cats.jpg", "caption": c}] for m, c in (("a", "one cat"), ("b", "two cats"))}
    d = run_arena(rows, judge=scripted("Answer 1", "x", method="gpt4v-pairwise"), round_robin=True, bootstrap=0).to_dict()
    assert "leaderboards_by_judge" not in d and "rank_correlation" not in d


# ------------------------------------------------------------------------------------ CLI
def score_args(out: Path, *more: str) -> list[str]:
    return ["score", "--method", "vanilla", "--images", str(IMAGES), "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache", *more]


def test_cli_score_with_backend_twice_prints_the_agreement_that_agree_finds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "panel.jsonl"
    rc = main(score_args(out, "--backend", "panel-test:up", "--backend", "panel-test:down", "--backend", "scripted:The score is 50."))
    printed = capsys.readouterr().out
    assert rc == 0
    records = read(out)
    assert len(records) == 6 and all(r["status"] == "ok" for r in records)
    for r in records:
        up, down, fifty = (e["score"] for e in r["details"]["panel"])
        assert up + down == 100.0 and fifty == 50.0 and r["score"] == pytest.approx(50.0)  # (d + 100 - d + 50) / 3
    assert records[0]["backend"] == "panel:mean(panel-test:up, panel-test:down, scripted:The score is 50.)"
    members = member_records(records)
    report = capjudge.agree([members["panel-test:up"], members["panel-test:down"]], ["up", "down"], bootstrap=0)
    tau = report.pairs[0].measures["kendall_tau_b"]
    ups = [r["details"]["panel"][0]["score"] for r in records]
    assert tau == pytest.approx(-100.0) and tau == pytest.approx(100 * kendall_tau_b(ups, [100 - u for u in ups]))
    assert "the judges' agreement" in printed
    row = next(line for line in printed.splitlines() if "│ panel-test:up" in line and "panel-test:down" in line)
    cells = [c.strip() for c in row.split("│") if c.strip()]
    assert cells[2:] == ["6", f"{tau:.1f}", f"{report.pairs[0].measures['spearman']:.1f}", f"{report.pairs[0].measures['pearson']:.1f}"]


def test_cli_resume_keeps_a_panels_records_and_refuses_another_panel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "panel.jsonl"
    panel = ["--backend", "panel-test:up", "--backend", "panel-test:down"]
    assert main(score_args(out, *panel, "--quiet")) == 0
    first = out.read_text()
    assert main(score_args(out, *panel)) == 0
    assert "6 record(s) kept from the results file" in capsys.readouterr().out
    assert out.read_text() == first
    # Another aggregate, or another judge, is another panel: refused (exit 2), the file untouched.
    assert main(score_args(out, *panel, "--panel-aggregate", "median")) == 2
    assert "panel:median(" in capsys.readouterr().err
    assert main(score_args(out, "--backend", "panel-test:up", "--backend", "scripted:3")) == 2
    assert out.read_text() == first


def test_cli_panel_file_and_its_bad_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "panel.json"
    good.write_text(json.dumps({"aggregate": "median", "judges": [{"backend": "scripted:The score is 10.", "name": "low"}, {"backend": "scripted:The score is 30."}, {"backend": "panel-test:up", "name": "up"}]}))
    out = tmp_path / "out.jsonl"
    assert main(score_args(out, "--panel", str(good), "--quiet")) == 0
    for r in read(out):
        scores = sorted(e["score"] for e in r["details"]["panel"])
        assert r["score"] == scores[1] and [e["name"] for e in r["details"]["panel"]] == ["low", "scripted:The score is 30.", "up"]
    cases = [
        ("not json", "not a JSON file"),
        (json.dumps([{"backend": "scripted:1"}, {"judge": "llava-1.5"}]), "entry 2: 'backend' (a backend spec string) is required"),
        (json.dumps([{"backend": "scripted:1"}, {"backend": "scripted:2", "backends": 1}]), "entry 2 (scripted:2): unknown key(s) 'backends'"),
        (json.dumps([{"backend": "scripted:1"}, {"backend": "nosuchkind:x"}]), "entry 2 (nosuchkind:x)"),
        (json.dumps([{"backend": "scripted:1"}, {"backend": "scripted:2", "backend_options": {"device": "cuda"}}]), "entry 2 (scripted:2)"),
        (json.dumps([{"backend": "scripted:1"}, {"backend": "scripted:2", "backend_options": ["x"]}]), "entry 2 (scripted:2): 'backend_options' must be an object"),
        (json.dumps([{"backend": "scripted:1"}]), "a panel needs two or more judges, got 1"),
        (json.dumps({"judges": [{"backend": "scripted:1"}, {"backend": "scripted:2"}], "quorum": 3}), "the quorum must be a whole number from 1 to 2"),
        (json.dumps({"judges": [{"backend": "scripted:1"}, {"backend": "scripted:2"}], "vote": "x"}), "unknown key(s) 'vote'"),
    ]
    bad = tmp_path / "bad.json"
    for text, message in cases:
        bad.write_text(text)
        assert main(score_args(tmp_path / "never.jsonl", "--panel", str(bad))) == 2, text
        err = capsys.readouterr().err
        assert message in " ".join(err.split()), (text, err)
        assert f"--panel {bad}" in " ".join(err.split())
    assert not (tmp_path / "never.jsonl").exists()
    # --panel with --backend, --panel-aggregate without a panel, a panel with --batch: usage errors.
    assert main(score_args(out, "--panel", str(good), "--backend", "scripted:1")) == 2
    assert main(score_args(out, "--backend", "scripted:1", "--panel-aggregate", "median")) == 2
    assert main(score_args(out, "--backend", "scripted:1", "--backend", "scripted:2", "--batch")) == 2
    assert main(["score", "--method", "vanilla", "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out)]) == 2
    assert "give a backend" in capsys.readouterr().err


def test_cli_compare_with_a_panel_reports_the_majority_and_kappa(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inp = tmp_path / "pairs.jsonl"
    captions = [(r["caption"], r["model"]) for r in map(json.loads, (EXAMPLES / "arena.jsonl").read_text().splitlines())]
    human = [c for c, m in captions if m == "human"]
    swap = [c for c, m in captions if m == "swap"]
    inp.write_text("".join(json.dumps({"id": f"p{k}", "image": "cats.jpg", "caption_a": a, "caption_b": b}) + "\n" for k, (a, b) in enumerate(zip(human, swap, strict=True))))
    out = tmp_path / "out.jsonl"
    judges = ["panel-test:prefer-human-swap-repeat", "panel-test:prefer-swap-human-repeat", "panel-test:prefer-human-repeat-swap"]
    rc = main(["compare", "--images", str(IMAGES), "--input", str(inp), "--out", str(out), "--no-cache", *(x for j in judges for x in ("--backend", j))])
    printed = capsys.readouterr().out
    assert rc == 0
    records = read(out)
    assert [r["verdict"] for r in records] == ["A"] * 6  # human first in two judges of three
    assert all(r["details"]["panel_votes"] == {"A": 2, "B": 1, "tie": 0} for r in records)
    members = member_records(records)
    report = capjudge.agree(list(members.values()), list(members), bootstrap=0)
    by_pair = {(p.a, p.b): p.measures for p in report.pairs}
    assert by_pair[(judges[0], judges[2])]["agreement"] == 100.0 and by_pair[(judges[0], judges[1])]["agreement"] == 0.0
    assert "Cohen's kappa" in printed and "agreement %" in printed


def test_cli_arena_with_a_panel_in_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "battles.jsonl"
    judges = ["panel-test:prefer-human-swap-repeat", "panel-test:prefer-repeat-swap-human"]
    argv = ["arena", "--input", str(EXAMPLES / "arena.jsonl"), "--round-robin", "--images", str(IMAGES), "--out", str(out), "--no-cache", "--bootstrap", "0", "--format", "json"]
    assert main([*argv, *(x for j in judges for x in ("--backend", j))]) == 0
    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [e["model"] for e in d["leaderboards_by_judge"][judges[0]]] == ["human", "swap", "repeat"]
    assert [e["model"] for e in d["leaderboards_by_judge"][judges[1]]] == ["repeat", "swap", "human"]
    assert d["rank_correlation"]["pairs"] == [{"a": judges[0], "b": judges[1], "kendall_tau_b": -100.0, "models": 3}]
    assert d["backend"] == f"panel:mean({judges[0]}, {judges[1]})"
    # Every battle split one vote each: the panel's verdicts are stated ties.
    assert all(r["verdict"] == "tie" and r["details"]["panel_tie"] for r in read(out))
    # The table says it too; a re-run keeps every battle.
    assert main([*argv[:-2], *(x for j in judges for x in ("--backend", j))]) == 0
    shown = capsys.readouterr().out
    assert "leaderboards by judge" in shown and "Kendall tau-b -100.0 over 3 models" in " ".join(shown.split())


SECRET = "pw-panel-7s3cr3t"


def test_a_secret_in_a_judges_spec_is_written_nowhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out.jsonl"
    with running_server() as server:
        port = server.port
        spec = f"openai-compatible:http://bob:{SECRET}@127.0.0.1:{port}/v1#gpt-4o"
        rc = main(score_args(out, "--backend", spec, "--backend", "scripted:The score is 50."))
        captured = capsys.readouterr()
        assert server.count == 6  # the API judge was asked every sample
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps([{"backend": spec, "backend_options": {"concurrency": "lots"}}, {"backend": "scripted:1"}]))
        refused = main(score_args(tmp_path / "o2.jsonl", "--panel", str(bad)))
        refusal = capsys.readouterr()
    assert rc == 0 and refused == 2
    masked = f"openai-compatible:http://***@127.0.0.1:{port}/v1#gpt-4o"
    records = read(out)
    assert all(r["status"] == "ok" for r in records)
    assert records[0]["backend"] == f"panel:mean({masked}, scripted:The score is 50.)"
    assert records[0]["details"]["panel"][0]["backend"] == masked
    assert "entry 1 (openai-compatible:http://***@127.0.0.1" in " ".join(refusal.err.split())
    for where, text in [("results", out.read_text()), ("stdout", captured.out), ("stderr", captured.err), ("refusal", refusal.err + refusal.out)]:
        assert SECRET not in text, where


def test_a_retry_bypasses_every_judges_cache(tmp_path: Path) -> None:
    """The runner's --retry-errors goes through ``panel.backend``: every judge asks again."""
    from capjudge.backends.cache import bypass_cache

    def judge(text: str, model: str) -> Judge:
        return Judge("vanilla", ScriptedBackend(text, model=model), images_root=IMAGES, cache_dir=tmp_path / "cache")

    panel = Panel([judge("30", "a"), judge("50", "b")])
    first = panel.score("cats.jpg", "two cats")
    again = panel.score("cats.jpg", "two cats")
    with bypass_cache(panel.backend):
        fresh = panel.score("cats.jpg", "two cats")
    assert first.details["cached"] == [False, False] and again.details["cached"] == [True, True]
    assert fresh.details["cached"] == [False, False] and fresh.score == again.score == 40.0


# -- hostile panel files (issue #30, item 16)


def test_a_panel_file_nested_too_deeply_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    panel = tmp_path / "panel.json"
    panel.write_text("[" * 100_000 + "]" * 100_000)
    ex = Path(__file__).resolve().parents[1] / "examples"
    argv = ["score", "--panel", str(panel), "--method", "vanilla", "--input", str(ex / "captions.jsonl"), "--images", str(ex / "images"), "--out", str(tmp_path / "o.jsonl"), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--panel {panel}: not a JSON file (nested too deeply" in err and "internal error" not in err

