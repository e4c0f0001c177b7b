"""A real training loop (issue #24, item 2): TRL's GRPOTrainer runs 2 steps on the CPU with a tiny
random policy and capjudge's reward on the tiny HF judge, and the rewards it logs are the judge's
scores of those completions. Needs TRL (``pip install 'capjudge[rl]'``; ``make test`` installs it).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.hf, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "images"
PROMPTS = {"Describe the picture of the cats:": EXAMPLES / "cats.jpg", "Describe the picture of the dog:": EXAMPLES / "dog.jpg"}


def tiny_policy() -> tuple[Any, Any]:
    """A tiny random Llama causal LM on the tiny LLaVA's tokenizer (built offline, seeded)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from capjudge.testing.tiny_llava import build_tokenizer

    tok = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
        max_position_embeddings=256, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config), tok


def test_grpo_trainer_logs_the_judges_scores(tiny_llava_dir: Path, tmp_path: Path) -> None:
    trl = pytest.importorskip("trl", reason="TRL is not installed: pip install 'capjudge[rl]' (make test installs it)")
    pytest.importorskip("pyarrow", reason="TRL writes the completions table with pandas.to_parquet")
    import pandas as pd
    from datasets import Dataset

    from capjudge import Judge, Sample
    from capjudge.reward import make_async_reward, make_reward

    policy, tok = tiny_policy()
    # A text-only policy: the image goes in a column of its own ("image" would be fed to the policy).
    dataset = Dataset.from_list([{"prompt": p, "image_path": str(i)} for p, i in PROMPTS.items()])
    spec = f"hf:{tiny_llava_dir}"
    sync_reward = make_reward("fleur", spec, image_column="image_path", name="judge_sync")
    async_reward = make_async_reward("fleur", spec, image_column="image_path", name="judge_async")
    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_generations=4, max_completion_length=12, max_steps=2,
        logging_steps=1, log_completions=True, report_to=[], use_cpu=True, bf16=False, save_strategy="no", seed=0, dataloader_num_workers=0,
    )
    trainer = trl.GRPOTrainer(model=policy, reward_funcs=[sync_reward, async_reward], args=args, train_dataset=dataset, processing_class=tok)
    try:
        trainer.train()
    finally:
        async_reward.close()
        sync_reward.close()

    steps = [h for h in trainer.state.log_history if "rewards/judge_sync/mean" in h]
    tables = sorted((tmp_path / "out" / "completions").glob("completions_*.parquet"))
    assert len(steps) == 2 and len(tables) == 2
    alone = Judge("fleur", spec, backend_options={"prefix_reuse": False})  # each completion scored on its own
    scored = 0
    for step, table in zip(steps, tables):
        rows = pd.read_parquet(table)
        assert len(rows) == 8 and set(rows["prompt"]) <= set(PROMPTS)
        expected = []
        for prompt, completion, got_sync, got_async in zip(rows["prompt"], rows["completion"], rows["judge_sync"], rows["judge_async"]):
            result = alone.score(Sample(PROMPTS[prompt], completion))
            expected.append(result.score)
            for got in (got_sync, got_async):
                if result.score is None:
                    assert math.isnan(got), (completion, result.error)
                else:
                    assert got == pytest.approx(result.score, abs=1e-4), completion  # fleur: on 0-1 already
            scored += result.score is not None
        finite = [x for x in expected if x is not None]
        if finite:  # the logged mean is the mean of the judge's scores (None left out)
            assert step["rewards/judge_sync/mean"] == pytest.approx(sum(finite) / len(finite), abs=1e-4)
            assert step["rewards/judge_async/mean"] == pytest.approx(sum(finite) / len(finite), abs=1e-4)
    assert scored > 0
    alone.close()
