"""Robustness probes: does a judge see repetition, incoherence, hard negatives and injected instructions?

* :mod:`capjudge.probes.perturbations`: deterministic caption perturbations (seed 002 Table 3
  fluency flaws, seed 003 hard negatives, FOIL noun swaps, instruction injection);
* :mod:`capjudge.probes.runner`: judge each caption and its perturbations, per-kind statistics;
* :mod:`capjudge.probes.choose_one`: seed 002 Sec. 4.4 choose-one-of-N (Flaws Caption style);
* :mod:`capjudge.probes.report`: Markdown, JSON and a bar chart.

Importing this package also registers the opt-in hardened methods ``fleur-hardened`` and
``vanilla-hardened`` (the caption delimited as data), unless the registry already has them.
"""

from __future__ import annotations

from capjudge.prompts.registry import LLAVA_V1_SYSTEM, Method, list_methods, register_method

HARDENED_METHODS: tuple[Method, ...] = (
    Method("fleur-hardened", "fleur_hardened", scale=(0.0, 1.0), smoothing=True, explain_template="fleur_explain", system=LLAVA_V1_SYSTEM, max_new_tokens=16, paper="capjudge variant of FLEUR (seed 004, Sec. 3.1): caption delimited as data", description="FLEUR with the caption between markers and a note that text inside them is data, not instructions (opt-in hardening)."),
    Method("vanilla-hardened", "vanilla_hardened", system=LLAVA_V1_SYSTEM, paper="capjudge variant of VisCE2 Vanilla (seed 001, Table 5): caption delimited as data", description="Vanilla with the caption between markers and a note that text inside them is data, not instructions (opt-in hardening)."),
)
"""The hardened variants; the paper templates stay word for word."""

for _m in HARDENED_METHODS:
    if _m.name not in list_methods():
        register_method(_m)

from capjudge.probes.perturbations import (  # noqa: E402 - after the method registration
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
    "HARDENED_METHODS",
    "KINDS",
    "PERTURBATIONS",
    "NotApplicable",
    "PerturbOptions",
    "Perturbed",
    "perturb",
    "perturb_all",
    "resolve_kinds",
]
