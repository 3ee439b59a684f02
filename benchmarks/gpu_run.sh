#!/bin/bash
# The GPU measurements quoted in docs/benchmarks.md, run from a copy of the tree on a GPU machine
# (the working tree with marin_lab/, experiments/ and benchmarks/ at its root). Output goes to $OUT
# (default ./gpu-out): a log with the device, the load before and after, and each script's JSON.
#
#   bash benchmarks/gpu_run.sh fp8-probe                    which GEMMs XLA emits for fp8_matmul alone
#   bash benchmarks/gpu_run.sh fp8 [--batch 4] [--model llama_1b] [--precisions bf16,fp8,fp8_delayed]
#                                  [--flags default|no-triton|no-triton-no-merger] [--attention auto|xla|einsum]
#   bash benchmarks/gpu_run.sh qlora [ARGS...]              benchmarks/qlora_memory.py ARGS
#
# Float8 GEMMs need XLA's Triton GEMMs off (--flags no-triton): docs/precision.md says why.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.94}
what=${1:?usage: gpu_run.sh fp8-probe|fp8|qlora [ARGS...]}; shift

xla_flags() {
  case "$1" in
    default) echo "" ;;
    no-triton) echo "--xla_gpu_enable_triton_gemm=false" ;;
    no-triton-no-merger) echo "--xla_gpu_enable_triton_gemm=false --xla_disable_hlo_passes=dot-merger" ;;
    *) echo "gpu_run.sh: --flags must be default, no-triton or no-triton-no-merger, not '$1'" >&2; exit 2 ;;
  esac
}

uptime; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import jax; print('jax', jax.__version__, jax.devices())"

case "$what" in
  fp8-probe)
    for flags in default no-triton; do
      XLA_FLAGS=$(xla_flags $flags) python3 benchmarks/fp8_gemm_probe.py --rows 8192 --k 2048 --n 2048 \
        --out "$OUT/fp8_probe_$flags.json"
    done ;;
  fp8)
    batch=4 model=llama_1b precisions=bf16,fp8,fp8_delayed flags=no-triton-no-merger attention=auto
    while [ $# -gt 0 ]; do
      case "$1" in
        --batch) batch=$2; shift 2 ;;
        --model) model=$2; shift 2 ;;
        --precisions) precisions=$2; shift 2 ;;
        --flags) flags=$2; shift 2 ;;
        --attention) attention=$2; shift 2 ;;
        *) echo "gpu_run.sh fp8: unknown option '$1'" >&2; exit 2 ;;
      esac
    done
    mkdir -p "$OUT/hlo_$flags"
    XLA_FLAGS=$(xla_flags $flags) python3 benchmarks/train_throughput.py --device gpu --no-torch \
      --models "$model" --batch "$batch" --seq 2048 --steps 5 --warmup 2 --repeats 5 \
      --precisions "$precisions" --attention "$attention" --out "$OUT/fp8_${model}_b${batch}_${flags}_$attention.json" \
      --hlo-dir "$OUT/hlo_$flags" ;;
  qlora)
    python3 benchmarks/qlora_memory.py --out "$OUT/qlora_memory.json" "$@" ;;
  *) echo "gpu_run.sh: WHAT must be fp8-probe, fp8 or qlora, not '$what'" >&2; exit 2 ;;
esac
uptime; echo done
