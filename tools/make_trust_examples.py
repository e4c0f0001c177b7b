"""Write the synthetic example files of examples/trust/ (seeded; no model, no benchmark data).

python tools/make_trust_examples.py   # rewrites examples/trust/*.jsonl

Two pairwise judges on 400 caption pairs of 100 made-up images: a cheap one with a
``details.confidence`` that tracks its accuracy, a strong one asked in both orders (its confidence
is the agreement of the two votes); 300 pairs carry human verdicts (one or three annotators). And a
score judge (0-100) on 300 captions, 120 of them with human scores on a 1-5 scale.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "examples" / "trust"
FLIP = {"A": "B", "B": "A"}


def _write(name: str, rows: list[dict]) -> None:
    with (OUT / name).open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def pairs(rng: np.random.Generator) -> None:
    n = 400
    truth = rng.choice(["A", "B"], n)
    human, cheap, strong = [], [], []
    for i in range(n):
        pid, image = f"p{i:03d}", f"img{i // 4:03d}.jpg"
        if i < 300:
            if i % 5 == 0:  # three annotators, one of them may disagree
                votes = [truth[i], truth[i], truth[i] if rng.random() < 0.7 else FLIP[truth[i]]]
                human.append({"id": pid, "human": votes})
            else:
                human.append({"id": pid, "human": truth[i]})
        conf = float(np.round(rng.uniform(0.5, 1.0), 4))
        verdict = truth[i] if rng.random() < conf**0.5 else FLIP[truth[i]]
        cheap.append({"id": pid, "image": image, "caption_a": f"caption a {i}", "caption_b": f"caption b {i}", "verdict": verdict, "method": "gpt4v-pairwise", "backend": "openai:gpt-4o-mini", "model": "gpt-4o-mini", "template_hash": "example", "mode": "single", "votes": [verdict], "raw": [verdict], "status": "ok", "error": None, "details": {"confidence": conf, "usage": [{"prompt_tokens": 900, "completion_tokens": 3}], "cost_usd": [0.00014]}})
        agree = rng.random() < 0.85
        first = truth[i] if rng.random() < 0.93 else FLIP[truth[i]]
        votes = [first, first] if agree else [first, FLIP[first]]
        verdict = first if agree else "tie"
        strong.append({"id": pid, "image": image, "caption_a": f"caption a {i}", "caption_b": f"caption b {i}", "verdict": verdict, "method": "gpt4v-pairwise", "backend": "openai:gpt-4o", "model": "gpt-4o", "template_hash": "example", "mode": "pairwise", "votes": votes, "raw": votes, "status": "ok", "error": None, "details": {"usage": [{"prompt_tokens": 900, "completion_tokens": 3}] * 2, "cost_usd": [0.00228, 0.00228]}})
    strong[7] = {**strong[7], "status": "error", "verdict": None, "votes": [], "error": "pair p007: backend error: example"}
    _write("human_pairs.jsonl", human)
    _write("judge_cheap.jsonl", cheap)
    _write("judge_strong.jsonl", strong)


def scores(rng: np.random.Generator) -> None:
    n = 300
    quality = rng.uniform(1, 5, n)
    human, judge = [], []
    for i in range(n):
        sid, image = f"s{i:03d}", f"img{i // 3:03d}.jpg"
        # the judge is monotone in quality but squeezed towards the top of its scale, with noise
        score = float(np.clip(100 * (0.5 + 0.5 * ((quality[i] - 1) / 4) ** 0.5) + rng.normal(0, 6), 0, 100))
        judge.append({"id": sid, "image": image, "caption": f"caption {i}", "score": round(score, 2), "method": "fleur", "backend": "hf:example", "model": "example", "template_hash": "example", "raw": None, "status": "ok", "error": None, "scale": [0.0, 100.0], "smoothed": True, "details": {}})
        if i < 120:
            votes = [int(np.clip(np.round(quality[i] + rng.normal(0, 0.5)), 1, 5)) for _ in range(1 if i % 4 else 3)]
            human.append({"id": sid, "human": votes if len(votes) > 1 else votes[0]})
    _write("human_scores.jsonl", human)
    _write("judge_scores.jsonl", judge)


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    pairs(np.random.default_rng(31))
    scores(np.random.default_rng(32))
