"""Parity of the HF backend and a vLLM server on the same weights: the figures of docs/backends.md.

Builds the tiny LLaVA for vLLM (capjudge.testing.vllm_server), starts one vLLM server from the vLLM
venv (``tools/vllm_venv.sh`` builds it; or ``--vllm-python``), and runs ``capjudge.parity.run_parity``
on the bundled example images in three settings:

1. as served: the model's own chat template (no BOS) and HF's LLaVA-1.5 preprocessing (pad to square);
2. ``pad_square=false`` on HF: same pixels, prompt still without BOS;
3. and ``add_special_tokens=true`` on vLLM: same pixels, same prompt (the fix);
4. the packaged ``llava_v1`` server chat template sent per request instead (the other fix).

    python benchmarks/parity_vllm.py            # table
    python benchmarks/parity_vllm.py --json     # last line: one JSON object
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = [
    "A cat sleeping on a sofa.",
    "Two dogs running in the park.",
    "A man riding a red bike on the street.",
    "Several people at the beach.",
    "A small bird on a tree.",
    "A plate of food on a table.",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm-python", default=None, help="python of a vLLM env (default: the one tools/vllm_venv.sh builds)")
    ap.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from capjudge.backends.hf import HFBackend
    from capjudge.parity import run_parity
    from capjudge.prompts.server import server_chat_template
    from capjudge.testing.vllm_server import VLLMServer, build_tiny_llava_for_vllm

    py = args.vllm_python or subprocess.run([str(ROOT / "tools" / "vllm_venv.sh")], capture_output=True, text=True, check=True).stdout.strip()
    images = sorted((ROOT / "examples" / "images").glob("*.jpg"))
    samples = [{"image": str(img), "caption": c, "id": f"{img.stem}-{i}"} for img in images for i, c in enumerate(CAPTIONS)]
    out: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        hf_dir, vllm_dir = build_tiny_llava_for_vllm(tmp)
        with VLLMServer(py, vllm_dir, extra_args=["--trust-request-chat-template"]) as server:
            settings = {
                "as served": ({"pad_square": True}, {}),
                "hf pad_square=false": ({"pad_square": False}, {}),
                "+ add_special_tokens": ({"pad_square": False}, {"add_special_tokens": True}),
                "+ llava_v1 template": ({"pad_square": False}, {"extra_body": {"chat_template": server_chat_template("llava_v1")}}),
            }
            for name, (hf_opts, v_opts) in settings.items():
                hf = HFBackend(str(hf_dir), dtype="float32", **hf_opts)
                r = run_parity(samples, hf, server.spec, method="fleur", backend_options_b=v_opts,
                               pairs=[{"image": s["image"], "caption_a": CAPTIONS[0], "caption_b": CAPTIONS[1], "id": s["id"]} for s in samples[:: len(CAPTIONS)]])
                hf.close()
                d = r.to_dict()
                out[name] = {k: d[k] for k in ("n_both", "max_abs_diff", "mean_abs_diff", "same_answer", "kendall_tau_b", "spearman", "verdict_flips", "prompt_checked", "prompt_differs")}
                diff = d["first_token_diff"]
                out[name]["first_token_diff"] = None if diff is None else f"{diff['index']}: {diff['a_token']!r} vs {diff['b_token']!r}"
            out["server"] = {"startup_s": round(server.startup_s or 0.0, 1)}
    print(f"{'setting':24} {'max|d|':>9} {'mean|d|':>9} {'same ans':>8} {'tau_b':>6} {'flips':>5}  prompts differ (first)")
    for name, d in out.items():
        if name == "server":
            continue
        print(f"{name:24} {d['max_abs_diff']:9.2e} {d['mean_abs_diff']:9.2e} {d['same_answer']:8.0%} {d['kendall_tau_b']:6.3f} {d['verdict_flips']:5}  {d['prompt_differs']}/{d['prompt_checked']} ({d['first_token_diff']})")
    print(f"vLLM server ready after {out['server']['startup_s']} s")
    if args.json:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
