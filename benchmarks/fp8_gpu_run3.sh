#!/bin/bash
# Third H100 run (lead, session 19): fp8_delayed at 1B, and the dot-merger pass disabled.
# Run from a copy of the tree (marin_lab/, experiments/, benchmarks/ and this script at its root; site/ holds
# draccus and its pure-Python dependencies for a device without them); output goes to $OUT.
cd "$(dirname "$0")"; exec > >(tee $OUT/log.txt) 2>&1
export PYTHONPATH=.:site PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.94
NT=--xla_gpu_enable_triton_gemm=false
uptime; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 -c "import jax; print('jax', jax.__version__)"
python3 -c "import experiments.models, benchmarks" || exit 3
T="benchmarks/train_throughput.py --device gpu --no-torch --models llama_1b --batch 4 --seq 2048 --steps 5 --warmup 2 --repeats 5"
mkdir -p /tmp/hlo_nt /tmp/hlo_nodm
XLA_FLAGS=$NT timeout 170 python3 $T --precisions bf16,fp8,fp8_delayed --out $OUT/fp8_1b_notriton_delayed.json --hlo-dir /tmp/hlo_nt 2>&1 | grep -v "^W0\|Warning"
XLA_FLAGS="$NT --xla_disable_hlo_passes=dot-merger" timeout 130 python3 $T --precisions bf16,fp8 --out $OUT/fp8_1b_notriton_nodotmerger.json --hlo-dir /tmp/hlo_nodm 2>&1 | grep -v "^W0\|Warning"
tar czf $OUT/hlo.tar.gz -C /tmp hlo_nt hlo_nodm
uptime; echo done
