#!/usr/bin/env bash
# One short GPU lease, one command: FLEUR at K = 5 and long answers at batch 64 on LLaVA-1.5-7B
# shapes (random weights, float16), each against its memory-bandwidth floor.
#
#   bash benchmarks/gpu_long.sh [DIR]      # JSON and logs in DIR, else $OUT, else out/gpu
#
# 1. bench_judge.py --device cuda --k 5 --reps 3        (~1 min; cut at 150 s)
# 2. bench_long.py --device cuda --n 128 --slots 64 --reps 1, lengths 128-1280, text prompts,
#    one-by-one skipped; with --compare-graphs when HFBackend has decode_graphs  (~3-5 min; cut
#    at what is left of BUDGET_S, 480 s in all, by SIGTERM, after which it prints what it measured)
#
# Files: judge.json, long.json (the benchmarks' JSON lines), judge.log, long.log (their output),
# env.txt (python, torch, GPU), summary.txt (printed at the end too). Python: $PYTHON, else
# .venv/bin/python when it has CUDA torch, else python3; wheels in .whl/ are installed into
# /tmp/site first (no network is needed: the tokenizer is trained on the spot, weights are random).
set -u
cd "$(dirname "$0")/.."
out="${1:-${OUT:-out/gpu}}"
mkdir -p "$out"
budget="${BUDGET_S:-480}"
start=$(date +%s)
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}"

has_cuda() { "$1" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; }
py="${PYTHON:-}"
if [ -z "$py" ]; then
    if [ -x .venv/bin/python ] && has_cuda .venv/bin/python; then py=.venv/bin/python; else py=python3; fi
fi
# Wheels carried in .whl/ (a newer transformers, say; see the device notes) go first on the path.
if ls .whl/*.whl >/dev/null 2>&1; then
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
{
    echo "python: $py ($("$py" --version 2>&1))"
    "$py" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__); print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")' 2>&1
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
} | tee "$out/env.txt"
if ! has_cuda "$py"; then
    echo "no CUDA torch in $py: nothing run" | tee "$out/summary.txt"
    exit 1
fi
graphs=$(PYTHONPATH=src "$py" -c 'import inspect; from capjudge.backends.hf import HFBackend; print(int("decode_graphs" in inspect.signature(HFBackend.__init__).parameters))' 2>/dev/null || echo 0)

# run NAME LIMIT_S ARGS...: the benchmark's output in NAME.log, its last line (the JSON) in NAME.json
run() {
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit} s): $*"
    timeout -k 30 "$limit" "$py" "$@" --json >"$out/$name.log" 2>&1
    local rc=$?
    if tail -n 1 "$out/$name.log" | "$py" -c 'import json, sys; json.loads(sys.stdin.read())' 2>/dev/null; then
        tail -n 1 "$out/$name.log" >"$out/$name.json"
    else
        echo "   no JSON from $name (rc $rc); the end of its log:"
        tail -n 5 "$out/$name.log" | cut -c1-300
    fi
    echo "   $name: rc $rc after $(($(date +%s) - start)) s in all"
}

run judge 150 benchmarks/bench_judge.py --device cuda --k 5 --reps 3 --no-llamacpp
left=$((budget - ($(date +%s) - start)))
[ "$left" -lt 120 ] && left=120
extra=()
[ "$graphs" = 1 ] && extra=(--compare-graphs)
run long "$left" benchmarks/bench_long.py --device cuda --n 128 --slots 64 --reps 1 --alone-every 0 ${extra[@]+"${extra[@]}"}

"$py" - "$out" <<'EOF' | tee "$out/summary.txt"
import json, sys
from pathlib import Path

out = Path(sys.argv[1])


def load(name):
    try:
        return json.loads((out / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def f(x, spec=".2f"):
    return "n/a" if x is None else format(x, spec)


j, lg = load("judge"), load("long")
if j:
    print(f"FLEUR K={j['k']} ({j['model']}; {j['device']}): capjudge {f(j['capjudge_s_per_caption'], '.3f')} s/caption, "
          f"{f(j['speedup_vs_reference'])}x the reference; {f(j['ratio_to_floor'])}x the prefill floor, "
          f"{f(j['ratio_to_bandwidth_floor'])}x the bandwidth floor (target <= 2; {j['decode_steps']} decode steps, "
          f"{f(j['bandwidth_gbs'], '.0f')} GB/s); peak {f(j['peak_mib_capjudge'], '.0f')} MiB vs {f(j['peak_mib_reference'], '.0f')}")
else:
    print("FLEUR: no result (see judge.log)")
if lg:
    cj = lg["rows"].get("capjudge", {})
    eager = lg["rows"].get("capjudge_eager")
    print(f"long answers ({lg['model']}; {lg['gpu']}; {lg['n']} requests, {lg['lengths'][0]}-{lg['lengths'][1]} tokens, {lg['slots']} slots"
          f"{', PARTIAL' if lg.get('partial') else ''}): capjudge {f(cj.get('tokens_per_s'), '.0f')} tokens/s = "
          f"{f(lg['fraction_of_bandwidth_bound'], '.0%')} of the bandwidth bound {f(lg['bandwidth_bound_tokens_per_s'], '.0f')} tokens/s "
          f"(target >= 50%; {f(lg['bandwidth_gbs'], '.0f')} GB/s); {f(lg['speedup_vs_padded'])}x padded generate; "
          f"{f(lg['ratio_to_floor'])}x the measured floor; peak {f(cj.get('peak_gib'), '.1f')} GiB")
    if eager:
        print(f"decode graphs: capjudge {f(lg['speedup_graphs_vs_eager'])}x capjudge_eager ({f(eager['tokens_per_s'], '.0f')} tokens/s, "
              f"{f(eager['fraction_of_bandwidth_bound'], '.0%')} of the bound)")
    if lg.get("errors"):
        print(f"errors: {lg['errors']}")
else:
    print("long answers: no result (see long.log)")
EOF
echo "total $(($(date +%s) - start)) s; files in $out"
