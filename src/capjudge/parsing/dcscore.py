"""DCScore's readers and formulas (DeCapBench, MAGAer13/DeCapBench 9f3fb10, eval/evaluation_decapbench.py
and eval/compute_results.py; docs/methods.md "DCScore"), written for capjudge from the code's behaviour.

- :func:`read_json_answer`: the code's ``parse_text_json``: the text after the last ```` ```json ````, read as
  a Python literal, then as JSON, in the code's four tries; ``None`` when none reads.
- :func:`json_lines`: the code's ``format_json_input``: a fenced list, one JSON object per line.
- :func:`trial_scores`: one (verification, matching) pair's precision, recall and F1, over all
  facts and over the facts the extraction called relevant (the code's ``compute_precision_recall``).
- :func:`sample_scores`: the 3 x 3 trials of a caption, their averages and the caption's DCScore,
  ``(F1 + relevant F1) / 2`` (what ``compute_results.py`` averages over the valid captions).

These functions raise where the code raises (a missing key, an answer that is not a list, a matching
whose facts differ from the verification's, no fact to divide by): the code then evaluates the caption
again from the start (:mod:`capjudge.judges.dcscore`).
"""

from __future__ import annotations

import ast
import json
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

SCORE_KEYS = ("precision", "recall", "f1_score", "precision_relevant", "recall_relevant", "f1_score_relevant")
"""The per-trial numbers the code averages (``<key>_avg``)."""


def read_json_answer(text: str) -> Any:
    """The value of a judge answer as the code's ``parse_text_json`` reads it, or ``None``."""
    tail = text.split("```json")[-1]
    tries = (
        (ast.literal_eval, tail.split("```")[0].strip("\n")),
        (ast.literal_eval, tail.strip("`").strip().strip("\n").replace("\n", "")),
        (json.loads, tail.strip("`").strip().strip("\n").replace("\n", "")),
        (json.loads, tail.strip("`").strip().strip("\n").replace("\n", "").replace("`", "")),
    )
    for reader, candidate in tries:
        try:
            return reader(candidate)
        except Exception:  # noqa: BLE001, S112 - the code tries the next reading on any failure
            continue
    return None


def json_lines(items: Sequence[Any]) -> str:
    """A list as the code's ``format_json_input`` writes it into a prompt."""
    body = "".join(f"  {json.dumps(item, ensure_ascii=False)},\n" for item in items)
    return f"```json[\n{body}]\n```"


def unmatched(oracle_id: Any) -> bool:
    """A fact the matching gave no human fact (``None`` or the text ``"None"``)."""
    return oracle_id is None or oracle_id == "None"


def _weights(facts: list[dict[str, Any]], key: Any) -> dict[Hashable, float]:
    """1 / (facts matched to it) for each matched human fact."""
    counts: dict[Hashable, int] = defaultdict(int)
    for d in facts:
        if not unmatched(d["matched_oracle_id"]):
            counts[key(d["matched_oracle_id"])] += 1
    return {k: 1 / v for k, v in counts.items()}


def _counts(facts: list[dict[str, Any]], weights: dict[Hashable, float], key: Any, total: int) -> tuple[float, int, int]:
    """(weighted correct, correct, total): a verified unmatched fact adds 1 to all three (an extra
    fact the human facts lack), a verified matched one its match's weight to the first and 1 to
    the second."""
    correct: float = 0
    correct_prec = 0
    for d in facts:
        if d["verification"] == 1 and unmatched(d["matched_oracle_id"]):
            correct += 1
            correct_prec += 1
            total += 1
        elif d["verification"] == 1:
            correct += weights[key(d["matched_oracle_id"])]
            correct_prec += 1
    return correct, correct_prec, total


def _f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall + 1e-8)


def trial_scores(predicted: Any, oracle: Sequence[Any], verification: Any, mapping: dict[Any, Any], *, relevant_weights: str = "relevant", ids_as_text: bool = True) -> dict[str, float | int]:
    """One trial: the verification's facts (``verification``: ``[{"fact", "verification"}, ...]``)
    matched by ``mapping`` (fact -> human fact id). Precision: verified / facts; recall: the
    verified facts' weights (a human fact's weight shared by the facts matched to it) plus the
    verified unmatched facts, over the human facts plus the verified unmatched facts. The
    relevant subset: the facts the extraction (``predicted``) marked ``relevance`` 1.
    ``relevant_weights="all"`` weighs the relevant subset's matches by all facts' matches (the
    code's bug); ``ids_as_text=False`` counts the ids ``3`` and ``"3"`` apart (the code's)."""
    key = str if ids_as_text else (lambda x: x)
    facts = [{**d, "matched_oracle_id": None} for d in verification]
    if set(mapping) != {d["fact"] for d in facts}:
        raise ValueError("the matching's facts are not the verification's facts (the code's assertion)")
    for d in facts:
        d["matched_oracle_id"] = mapping[d["fact"]]
    weights = _weights(facts, key)
    correct, correct_prec, total = _counts(facts, weights, key, len(oracle))
    precision = correct_prec / len(facts)
    recall = correct / total
    relevant = {x["fact"] for x in predicted if x["relevance"] == 1}
    rel_facts = [d for d in facts if d["fact"] in relevant]
    rel_weights = weights if relevant_weights == "all" else _weights(rel_facts, key)
    correct_r, correct_prec_r, total_r = _counts(rel_facts, rel_weights, key, len(oracle))
    precision_r = correct_prec_r / len(rel_facts)
    recall_r = correct_r / total_r
    return {
        "precision": precision,
        "recall": recall,
        "f1_score": _f1(precision, recall),
        "total_atomic_facts": total,
        "precision_relevant": precision_r,
        "recall_relevant": recall_r,
        "f1_score_relevant": _f1(precision_r, recall_r),
        "total_atomic_facts_relevant": total_r,
    }


def mapping_of(answer: Any) -> dict[Any, Any]:
    """A matching answer as the code reads it: fact -> ``matched_oracle_id``."""
    return {d["fact"]: d["matched_oracle_id"] for d in answer}


def sample_scores(predicted: Any, oracle: Sequence[Any], verifications: Sequence[Any], mappings: Sequence[dict[Any, Any]], **rules: Any) -> dict[str, Any]:
    """Every (verification, matching) trial, verification first as the code loops, the mean of
    each number over the trials (``<key>_avg``) and ``dcscore``: ``(f1_score_relevant_avg +
    f1_score_avg) / 2``, the caption's term in ``compute_results.py``'s mean. ``rules``: see
    :func:`trial_scores`."""
    trials = [trial_scores(predicted, oracle, v, m, **rules) for v in verifications for m in mappings]
    out: dict[str, Any] = {f"{k}_avg": sum(t[k] for t in trials) / len(trials) for k in SCORE_KEYS}
    out["dcscore"] = (out["f1_score_relevant_avg"] + out["f1_score_avg"]) / 2
    out["trials"] = trials
    return out


__all__ = ["SCORE_KEYS", "json_lines", "mapping_of", "read_json_answer", "sample_scores", "trial_scores", "unmatched"]
