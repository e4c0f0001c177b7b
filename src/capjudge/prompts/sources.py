"""Where each method comes from: the papers (by title and link) and the official code.

Users read these names in ``capjudge methods``, in results and in the README; papers are always
named by title and link.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """A paper or a code repository a method is taken from."""

    key: str
    title: str
    url: str
    short: str

    def cite(self) -> str:
        """``Title (link)``."""
        return f"{self.title} ({self.url})"


SOURCES: dict[str, Source] = {
    s.key: s
    for s in (
        Source(
            "visce2",
            "Vision Language Model-based Caption Evaluation Method Leveraging Visual Context Extraction",
            "https://arxiv.org/abs/2402.17969",
            "VisCE2 paper",
        ),
        Source(
            "visce2-code",
            "VisCE2 official code (Silviase/VisCE2, commit f08b2e1)",
            "https://github.com/Silviase/VisCE2/tree/f08b2e15512c21151c01f406cdfa89069a54f0a7",
            "VisCE2 code",
        ),
        Source(
            "fleur",
            "FLEUR: An Explainable Reference-Free Evaluation Metric for Image Captioning Using a Large Multimodal Model",
            "https://aclanthology.org/2024.acl-long.205",
            "FLEUR paper",
        ),
        Source(
            "fleur-code",
            "FLEUR official code (Yebin46/FLEUR, commit b9cd6c9)",
            "https://github.com/Yebin46/FLEUR/tree/b9cd6c9c086113b9ad3d040522a85c776aff1225",
            "FLEUR code",
        ),
        Source(
            "gpt4v",
            "GPT-4V(ision) as a Generalist Evaluator for Vision-Language Tasks",
            "https://arxiv.org/abs/2311.01361",
            "GPT-4V evaluator paper",
        ),
        Source(
            "cobra",
            "Cobra Effect in Reference-Free Image Captioning Metrics",
            "https://arxiv.org/abs/2402.11572",
            "Cobra-effect paper",
        ),
        Source(
            "llava-critic",
            "LLaVA-Critic: Learning to Evaluate Multimodal Models (prompts: the lmms-lab/llava-critic-7b model card, Quick Start)",
            "https://arxiv.org/abs/2410.02712",
            "LLaVA-Critic paper and model card",
        ),
        Source(
            "caparena-code",
            "CapArena: Benchmarking and Analyzing Detailed Image Captioning in the LLM Era (official code njucckevin/CapArena, commit c251cdd)",
            "https://github.com/njucckevin/CapArena/tree/c251cdd14a3a4a33c6934e53feebb8d4862d655d",
            "CapArena code",
        ),
        Source(
            "capmas-code",
            "Toward Robust Hyper-Detailed Image Captioning: A Multiagent Approach and Dual Evaluation Metrics for Factuality and Coverage (official code adobe-research/CapMAS, commit ca2aa00)",
            "https://github.com/adobe-research/CapMAS/tree/ca2aa00c7135a726aa96197f3e189bcc54f587ca",
            "CapMAS code",
        ),
        Source(
            "clair",
            "CLAIR: Evaluating Image Captions with Large Language Models (as run by CapMAS's eval_clair.py, commit ca2aa00)",
            "https://arxiv.org/abs/2310.12971",
            "CLAIR paper, CapMAS code",
        ),
        Source(
            "capability",
            "What Is a Good Caption? A Comprehensive Visual Caption Benchmark for Evaluating Both Correctness and Thoroughness (CAPability; official code ali-vilab/CAPability, commit cebb82a)",
            "https://github.com/ali-vilab/CAPability/tree/cebb82afd070bb719f8890ff6a0042f5056fa9fb",
            "CAPability code",
        ),
        Source(
            "captionqa-code",
            "CaptionQA: Is Your Caption as Useful as the Image Itself? (official code bronyayang/CaptionQA, commit f729489)",
            "https://github.com/bronyayang/CaptionQA/tree/f7294897f724c35b95e5f8ea179d2c54a279c91e",
            "CaptionQA code",
        ),
        Source(
            "dcscore-code",
            "Painting with Words: Elevating Detailed Image Captioning with Benchmark and Alignment Learning (DeCapBench / DCScore, ICLR 2025; official code MAGAer13/DeCapBench, commit 9f3fb10)",
            "https://github.com/MAGAer13/DeCapBench/tree/9f3fb10896608e5134b3f7966d8b1b7f93f47835",
            "DeCapBench code",
        ),
        Source("capjudge", "capjudge's own variant", "", "capjudge"),
    )
}
