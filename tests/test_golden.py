"""Golden results: the results files ``score``, ``compare``, ``arena`` and ``probe`` write for the
bundled examples, on scripted judges and on the tiny HF LLaVA, must stay exactly what they are.

The files under ``tests/data/golden/`` were captured before the core redesign (issue 21); a change
of behaviour anywhere between the CLI and a record shows here as a diff naming the file, the record
and the field. Regenerate them ONLY when a change of results is intended, and say why in the commit:

    python tools/update_golden.py            # or: CAPJUDGE_UPDATE_GOLDEN=1 pytest tests/test_golden.py

Every run goes through ``capjudge.cli.main`` with ``--no-cache`` (no state leaks between runs or
from an earlier session). Before comparing, what legitimately varies between runs and machines is
normalised: the temporary folder, the examples folder and the tiny model's folder become
placeholders (``<TMP>``, ``<EXAMPLES>``, ``<TINY_MODEL>``); keys naming timings, dates, versions or
process ids are dropped (see ``_VOLATILE``). Everything else must match exactly, except floats of
the tiny HF model's runs: its logits differ in the last digits with the thread count and the CPU's
vector instructions (summation order), so there floats, at any depth, are compared with a relative
tolerance of 1e-5, or an absolute one of 1e-4 for values near zero: a probe's mean drop is the
difference of two near-equal scores, so its relative error is large where the scores' is tiny.
Measured, 1 thread against 2: every other float moves by at most 7e-7 relative; a mean drop in
percent of 0.0043 moves by 4e-6 (1e-3 relative), the largest absolute move is 6.6e-6. The model's greedy answers are unaffected by such differences on these inputs;
a changed answer (text, verdict, parse) still fails.

In every run, scripted ones included, the floats that come out of a numerical fit are compared with
a relative tolerance of 1e-6 (absolute 1e-9): the arena summary's ``bt`` and ``ci`` (Newton's method
on Bradley-Terry, through LAPACK, and its bootstrap refits), ``lc_win_rate`` and ``gamma`` (BFGS on
the length-controlled model). Their last digits depend on the machine's BLAS and CPU (a fresh
machine once gave a gamma differing in the 13th digit); both optimizers stop at a gradient of 1e-9
to 1e-10 of the data's scale, so two machines agree far inside 1e-6. Everything else stays exact.

The scripted runs answer in two ways: a fixed text (``scripted:<text>``, as users run it), and a
``golden-scripted:`` kind registered through the public ``register_backend`` whose answer is picked
from a list by a hash of the request's text, so rows get different answers (numbers in several
forms, verdicts, refusals) and the parsers, smoothing, pairwise votes and arena statistics are all
exercised. A change of any prompt's text changes that hash and therefore shows here too.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from capjudge.backends.base import Request
from capjudge.backends.registry import BackendSpec, register_backend
from capjudge.backends.scripted import ScriptedBackend
from capjudge.cli import main
from capjudge.core.errors import EXIT_ALL_FAILED

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
IMAGES = EXAMPLES / "images"
GOLDEN = Path(__file__).resolve().parent / "data" / "golden"
UPDATE = os.environ.get("CAPJUDGE_UPDATE_GOLDEN") == "1"
HF_REL_TOL = 1e-5
HF_ABS_TOL = 1e-4  # for values near zero: differences of near-equal scores (see the docstring)
# Floats of numerical fits, in every run (see the docstring): the keys that hold them, at any depth.
FIT_KEYS = frozenset({"bt", "ci", "lc_win_rate", "gamma"})
FIT_REL_TOL = 1e-6
FIT_ABS_TOL = 1e-9

# Keys whose values vary from run to run or machine to machine by nature (none of them is written
# today; listed so that adding one later does not break the golden test for no reason).
_VOLATILE = re.compile(
    r"^(elapsed|duration|seconds|time|timestamp|date|created|started|finished|version|capjudge_version|pid|host|hostname)$"
    r"|_(s|seconds|at|time|timestamp)$",
    re.I,
)

# Answers of the varied script: numbers in several forms for scoring prompts, verdicts in several
# forms for pairwise ones, and in both a refusal and an empty answer (recorded errors).
_SCORE_ANSWERS = ["0.73", "The score is 0.4.", "Rating: 85/100", "Score: 7 out of 10", "62", "I cannot judge this image.", ""]
_VERDICT_ANSWERS = [
    "Answer 1",
    "Answer 2",
    "Tie",
    "Answer 2. The second caption names the objects correctly.",
    "answer 1 is better",
    "Answer 1",
    "I cannot judge this image.",
]


def _varied_answer(request: Request) -> str:
    """An answer picked by a hash of the request's text (images, config aside): a verdict when the
    prompt shows two answers to choose from, a score otherwise."""
    text = "\n".join(f"{m.role}: {m.content}" for m in request.messages)
    answers = _VERDICT_ANSWERS if "Answer 2" in text else _SCORE_ANSWERS
    return answers[int(hashlib.sha256(text.encode()).hexdigest(), 16) % len(answers)]


def _golden_scripted(spec: BackendSpec, **options: Any) -> ScriptedBackend:
    backend = ScriptedBackend(_varied_answer, model="golden-scripted", **options)
    backend.spec = spec.raw
    return backend


register_backend("golden-scripted", _golden_scripted)


# --------------------------------------------------------------------------------- runs
# The exit codes of a run that wrote its results: 6 when no row succeeded (compare-grading-varied:
# every answer of the varied script is refused there), which is as golden as any other run.
_RAN = (0, 1, EXIT_ALL_FAILED)


def _score(backend: str, method: str, *extra: str) -> Callable[[Path], list[tuple[str, Path]]]:
    def run(tmp: Path) -> list[tuple[str, Path]]:
        out = tmp / "score.jsonl"
        args = ["score", "--method", method, "--backend", backend, "--images", str(IMAGES),
                "--input", str(EXAMPLES / "captions.jsonl"), "--out", str(out), "--no-cache", "--quiet", *extra]
        assert main(args) in _RAN, args  # failed rows are recorded, which is golden too
        return [("results", out)]
    return run


def _compare(backend: str, *extra: str) -> Callable[[Path], list[tuple[str, Path]]]:
    def run(tmp: Path) -> list[tuple[str, Path]]:
        out = tmp / "compare.jsonl"
        args = ["compare", "--backend", backend, "--images", str(IMAGES), "--input", str(EXAMPLES / "pairs.jsonl"),
                "--out", str(out), "--no-cache", "--quiet", *extra]
        assert main(args) in _RAN, args
        return [("results", out)]
    return run


def _arena(backend: str, *extra: str) -> Callable[[Path], list[tuple[str, Path]]]:
    def run(tmp: Path) -> list[tuple[str, Path]]:
        out = tmp / "battles.jsonl"
        args = ["arena", "--backend", backend, "--input", str(EXAMPLES / "arena.jsonl"), "--baseline", "human",
                "--images", str(IMAGES), "--out", str(out), "--no-cache", "--quiet", "--format", "json",
                "--bootstrap", "20", "--length-controlled", *extra]
        assert main(args) in _RAN, args
        return [("battles", out), ("summary", tmp / "stdout.json")]
    return run


def _probe(backend: str, method: str, kinds: str, *extra: str) -> Callable[[Path], list[tuple[str, Path]]]:
    def run(tmp: Path) -> list[tuple[str, Path]]:
        args = ["probe", "--backend", backend, "--method", method, "--captions", str(EXAMPLES / "captions.jsonl"),
                "--images", str(IMAGES), "--no-cache", "--quiet", "--kinds", kinds, "--pairwise",
                "--out", str(tmp / "probe.jsonl"), "--out-json", str(tmp / "probe.json"), *extra]
        assert main(args) in _RAN, args
        return [("results", tmp / "probe.jsonl"), ("report", tmp / "probe.json")]
    return run


FIXED_SCORE = "scripted:The score is 0.73."
VARIED = "golden-scripted:varied"
PROBE_KINDS = "repeat_word,truncate,colour_swap,noun_swap,inject_score,inject_text"

SCRIPTED_CASES: dict[str, Callable[[Path], list[tuple[str, Path]]]] = {
    "score-fleur-fixed": _score(FIXED_SCORE, "fleur"),
    "score-fleur-varied": _score(VARIED, "fleur"),
    "score-visce2-varied": _score(VARIED, "visce2"),
    "score-fleur-code-varied": _score(VARIED, "fleur-code"),
    "score-vanilla-code-varied": _score(VARIED, "vanilla-code", "--method-option", "no_number=zero"),
    "compare-pairwise-fixed": _compare("scripted:Answer 2"),
    "compare-pairwise-varied": _compare(VARIED),
    "compare-grading-fixed": _compare("scripted:Rating: 80/100", "--method", "vanilla", "--mode", "grading"),
    "compare-grading-varied": _compare(VARIED, "--method", "vanilla", "--mode", "grading"),
    "arena-fixed": _arena("scripted:Answer 1"),
    "arena-varied": _arena(VARIED),
    "probe-fleur-varied": _probe(VARIED, "fleur", PROBE_KINDS),
}

# The tiny model: short answers (its random weights ramble) keep the whole file fast.
HF_CASES: dict[str, Callable[[str], Callable[[Path], list[tuple[str, Path]]]]] = {
    "hf-score-fleur": lambda b: _score(b, "fleur", "--max-new-tokens", "4"),
    "hf-score-vanilla": lambda b: _score(b, "vanilla", "--max-new-tokens", "6"),
    "hf-score-fleur-code": lambda b: _score(b, "fleur-code", "--max-new-tokens", "6"),
    "hf-compare-pairwise": lambda b: _compare(b, "--max-new-tokens", "4"),
    "hf-compare-grading": lambda b: _compare(b, "--method", "vanilla", "--mode", "grading", "--max-new-tokens", "6"),
    "hf-arena": lambda b: _arena(b, "--max-new-tokens", "4"),
    "hf-probe": lambda b: _probe(b, "fleur", "repeat_word,colour_swap,inject_text", "--max-new-tokens", "4", "--limit", "2"),
}


# ---------------------------------------------------------------------------- normalising
def _normalise(value: Any, replacements: list[tuple[str, str]]) -> Any:
    """Placeholders for folders, volatile keys dropped, at any depth."""
    if isinstance(value, dict):
        return {k: _normalise(v, replacements) for k, v in value.items() if not _VOLATILE.search(k)}
    if isinstance(value, list):
        return [_normalise(v, replacements) for v in value]
    if isinstance(value, str):
        for old, new in replacements:
            value = value.replace(old, new)
        return value
    return value


def _read(path: Path) -> list[Any]:
    """A results file as records: JSONL line by line, a JSON file as one record."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return [json.loads(text)]


def _capture(run: Callable[[Path], list[tuple[str, Path]]], tmp: Path, capsys: pytest.CaptureFixture[str],
             replacements: list[tuple[str, str]]) -> dict[str, list[Any]]:
    capsys.readouterr()
    files = run(tmp)
    stdout = capsys.readouterr().out.strip().splitlines()
    got: dict[str, list[Any]] = {}
    for name, path in files:
        if path.name == "stdout.json":  # the arena's summary: the last line of --format json
            got[name] = [json.loads(stdout[-1])]
        else:
            got[name] = _read(path)
    reps = [(str(tmp), "<TMP>"), (str(EXAMPLES), "<EXAMPLES>"), *replacements]
    return {name: _normalise(records, reps) for name, records in got.items()}


# ----------------------------------------------------------------------------- comparing
def _diffs(want: Any, got: Any, where: str, rel_tol: float | None, key: str | None = None) -> Iterator[str]:
    """Every difference, as ``where: want ... got ...``; floats within rel_tol (or HF_ABS_TOL) when
    rel_tol is given, floats under a key of FIT_KEYS (``key``: the nearest enclosing dict key)
    within FIT_REL_TOL, else exactly equal."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got), key=str):
            if k not in got:
                yield f"{where}.{k}: missing (golden has {want[k]!r})"
            elif k not in want:
                yield f"{where}.{k}: unexpected new field ({got[k]!r})"
            else:
                yield from _diffs(want[k], got[k], f"{where}.{k}", rel_tol, str(k))
    elif isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            yield f"{where}: {len(got)} items, golden has {len(want)}"
        for i, (w, g) in enumerate(zip(want, got, strict=False)):
            yield from _diffs(w, g, f"{where}[{i}]", rel_tol, key)
    elif isinstance(want, float) and isinstance(got, float) and (rel_tol is not None or key in FIT_KEYS):
        rel, abs_ = (rel_tol, HF_ABS_TOL) if rel_tol is not None else (FIT_REL_TOL, FIT_ABS_TOL)
        if not math.isclose(want, got, rel_tol=rel, abs_tol=abs_) and not (math.isnan(want) and math.isnan(got)):
            yield f"{where}: golden {want!r}, got {got!r} (tolerance: relative {rel}, absolute {abs_})"
    elif type(want) is not type(got) or want != got:
        yield f"{where}: golden {want!r}, got {got!r}"


def _check(case: str, got: dict[str, list[Any]], rel_tol: float | None) -> None:
    path = GOLDEN / f"{case}.json"
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
        return
    assert path.is_file(), f"no golden file {path}: run tools/update_golden.py (and say why in the commit)"
    want = json.loads(path.read_text(encoding="utf-8"))
    problems: list[str] = []
    for name in sorted(set(want) | set(got)):
        if name not in got:
            problems.append(f"{name}: not written")
            continue
        if name not in want:
            problems.append(f"{name}: not in the golden file")
            continue
        for i, (w, g) in enumerate(zip(want[name], got[name], strict=False)):
            rid = g.get("id") if isinstance(g, dict) else None
            label = f"{name} record {i + 1}" + (f" (id {rid!r})" if rid is not None else "")
            problems.extend(_diffs(w, g, label, rel_tol))
        if len(want[name]) != len(got[name]):
            problems.append(f"{name}: {len(got[name])} records, golden has {len(want[name])}")
    if problems:
        shown = "\n  ".join(problems[:30]) + (f"\n  ... and {len(problems) - 30} more" if len(problems) > 30 else "")
        pytest.fail(f"results differ from the golden file {path.relative_to(ROOT)}:\n  {shown}", pytrace=False)


# ---------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("case", sorted(SCRIPTED_CASES))
def test_golden_scripted(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    got = _capture(SCRIPTED_CASES[case], tmp_path, capsys, [])
    _check(case, got, rel_tol=None)


@pytest.mark.hf
@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_golden_tiny_hf(case: str, tiny_llava_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = HF_CASES[case](f"hf:{tiny_llava_dir}?device=cpu")  # CPU numbers on any machine
    got = _capture(run, tmp_path, capsys, [(str(tiny_llava_dir), "<TINY_MODEL>")])
    _check(case, got, rel_tol=HF_REL_TOL)


def test_fit_floats_are_compared_with_a_tolerance_and_the_rest_exactly() -> None:
    # The float that failed CI on a fresh machine: a fit's last digits are the machine's, not ours.
    want = {"length": {"length_controlled": {"gamma": -395.94065890305455}}, "leaderboard": [{"bt": 1089.2009041278102, "ci": [785.2187031779303, 1349.1339208124841], "win_rate": 0.6875}]}
    got = {"length": {"length_controlled": {"gamma": -395.9406589029934}}, "leaderboard": [{"bt": 1089.2009041278, "ci": [785.21870317793, 1349.13392081248], "win_rate": 0.6875}]}
    assert list(_diffs(want, got, "summary", None)) == []
    got["leaderboard"][0]["bt"] = 1089.21  # a real change of the fit still fails
    got["leaderboard"][0]["win_rate"] = 0.6875000000001  # and a counted float is exact
    found = list(_diffs(want, got, "summary", None))
    assert len(found) == 2 and "bt" in found[0] and "relative 1e-06" in found[0] and "win_rate" in found[1]
