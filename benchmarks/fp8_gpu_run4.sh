#!/bin/bash
# Fourth H100 run (lead, session 19): all three policies with dot-merger off, at batch 4 and 8.
# Run from a copy of the tree (marin_lab/, experiments/, benchmarks/ and this script at its root; site/ holds
# draccus and its pure-Python dependencies for a device without them); output goes to $OUT.
cd "$(dirname "$0")"; exec > >(tee $OUT/log.txt) 2>&1
export PYTHONPATH=.:site PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.94
export XLA_FLAGS="--xla_gpu_enable_triton_gemm=false --xla_disable_hlo_passes=dot-merger"
T="benchmarks/train_throughput.py --device gpu --no-torch --models llama_1b --seq 2048 --steps 5 --warmup 2 --repeats 5 --precisions bf16,fp8,fp8_delayed"
timeout 170 python3 $T --batch 4 --out $OUT/fp8_1b_b4_nodm.json 2>&1 | grep -v "^W1\|Warning"
timeout 220 python3 $T --batch 8 --out $OUT/fp8_1b_b8_nodm.json 2>&1 | grep -v "^W1\|Warning"
uptime; echo done
