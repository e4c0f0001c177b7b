"""Meta-evaluation: agreement of a judge with human judgments.

>>> from capjudge.metaeval import load_dataset, load_results, evaluate
>>> bench = load_dataset("flickr8k-expert", "flickr8k.json")            # doctest: +SKIP
>>> ev = evaluate(bench, load_results("results.jsonl"))                  # doctest: +SKIP
>>> round(ev.measures["tau_c"], 1)                                      # doctest: +SKIP
53.0
"""

from __future__ import annotations

from capjudge.metaeval.convert import (
    fleur_pascal_annotations,
    fleur_records,
    fleur_results_to_jsonl,
    parse_fleur_results,
)
from capjudge.metaeval.datasets import (
    DATASET_NAMES,
    Benchmark,
    DatasetError,
    HumanPair,
    HumanRating,
    load_composite,
    load_dataset,
    load_flickr8k,
    load_foil,
    load_pascal50s,
    load_thumb,
    normalize_caption,
    sample_key,
)
from capjudge.metaeval.join import LoadedResults, load_results, results_from_records
from capjudge.metaeval.protocols import MetaEval, evaluate, evaluate_pairs, evaluate_ratings
from capjudge.metaeval.stats import (
    bootstrap_ci,
    bootstrap_cis,
    kendall_tau_b,
    kendall_tau_c,
    pair_outcomes,
    pairwise_accuracy,
    pearson,
    pick_one_accuracy,
    pick_one_credit,
    spearman,
)

__all__ = [
    "DATASET_NAMES",
    "Benchmark",
    "DatasetError",
    "HumanPair",
    "HumanRating",
    "LoadedResults",
    "MetaEval",
    "bootstrap_ci",
    "bootstrap_cis",
    "evaluate",
    "evaluate_pairs",
    "evaluate_ratings",
    "fleur_pascal_annotations",
    "fleur_records",
    "fleur_results_to_jsonl",
    "kendall_tau_b",
    "kendall_tau_c",
    "load_composite",
    "load_dataset",
    "load_flickr8k",
    "load_foil",
    "load_pascal50s",
    "load_results",
    "load_thumb",
    "normalize_caption",
    "pair_outcomes",
    "pairwise_accuracy",
    "parse_fleur_results",
    "pearson",
    "pick_one_accuracy",
    "pick_one_credit",
    "results_from_records",
    "sample_key",
    "spearman",
]
