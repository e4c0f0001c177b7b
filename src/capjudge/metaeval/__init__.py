"""Meta-evaluation: agreement of a judge with human judgments.

>>> from capjudge.metaeval import load_dataset, load_results, evaluate
>>> bench = load_dataset("flickr8k-expert", "flickr8k.json")            # doctest: +SKIP
>>> ev = evaluate(bench, load_results("results.jsonl"))                  # doctest: +SKIP
>>> round(ev.measures["tau_c"], 1)                                      # doctest: +SKIP
53.0
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from capjudge.core.lazyexport import lazy_attributes

# Imported lazily: the statistics pull in numpy and scipy, which `capjudge --help` and the other
# commands must not pay for (see tests/test_startup.py).
_LAZY: dict[str, str] = {
    "Benchmark": "capjudge.metaeval.datasets",
    "DATASET_NAMES": "capjudge.metaeval.datasets",
    "DatasetError": "capjudge.metaeval.datasets",
    "HumanPair": "capjudge.metaeval.datasets",
    "HumanRating": "capjudge.metaeval.datasets",
    "LoadedResults": "capjudge.metaeval.join",
    "MetaEval": "capjudge.metaeval.protocols",
    "bootstrap_ci": "capjudge.metaeval.stats",
    "bootstrap_cis": "capjudge.metaeval.stats",
    "evaluate": "capjudge.metaeval.protocols",
    "evaluate_pairs": "capjudge.metaeval.protocols",
    "evaluate_ratings": "capjudge.metaeval.protocols",
    "fleur_pascal_annotations": "capjudge.metaeval.convert",
    "fleur_records": "capjudge.metaeval.convert",
    "fleur_results_to_jsonl": "capjudge.metaeval.convert",
    "kendall_tau_b": "capjudge.metaeval.stats",
    "kendall_tau_c": "capjudge.metaeval.stats",
    "load_composite": "capjudge.metaeval.datasets",
    "load_dataset": "capjudge.metaeval.datasets",
    "load_flickr8k": "capjudge.metaeval.datasets",
    "load_foil": "capjudge.metaeval.datasets",
    "load_pascal50s": "capjudge.metaeval.datasets",
    "load_results": "capjudge.metaeval.join",
    "load_thumb": "capjudge.metaeval.datasets",
    "normalize_caption": "capjudge.metaeval.datasets",
    "pair_outcomes": "capjudge.metaeval.stats",
    "pairwise_accuracy": "capjudge.metaeval.stats",
    "parse_fleur_results": "capjudge.metaeval.convert",
    "pearson": "capjudge.metaeval.stats",
    "pick_one_accuracy": "capjudge.metaeval.stats",
    "pick_one_credit": "capjudge.metaeval.stats",
    "results_from_records": "capjudge.metaeval.join",
    "sample_key": "capjudge.metaeval.datasets",
    "spearman": "capjudge.metaeval.stats",
}

if TYPE_CHECKING:
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


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY)
