"""Robustness probes: does a judge see repetition, incoherence, hard negatives and injected instructions?

* :mod:`capjudge.probes.perturbations`: deterministic caption perturbations (the Cobra-effect paper Table 3
  fluency flaws, the GPT-4V evaluator paper hard negatives, FOIL noun swaps, instruction injection);
* :mod:`capjudge.probes.runner`: judge each caption and its perturbations, per-kind statistics;
* :mod:`capjudge.probes.choose_one`: the Cobra-effect paper Sec. 4.4 choose-one-of-N (Flaws Caption style);
* :mod:`capjudge.probes.report`: Markdown, JSON and a bar chart.

The opt-in hardened methods ``fleur-hardened`` and ``vanilla-hardened`` (the caption delimited as
data) are registered with the other methods in :mod:`capjudge.prompts.registry`.
"""

from __future__ import annotations

from capjudge.probes.perturbations import (
    KINDS,
    PERTURBATIONS,
    NotApplicable,
    Perturbed,
    PerturbOptions,
    perturb,
    perturb_all,
    resolve_kinds,
)

__all__ = [
    "KINDS",
    "PERTURBATIONS",
    "NotApplicable",
    "PerturbOptions",
    "Perturbed",
    "perturb",
    "perturb_all",
    "resolve_kinds",
]
