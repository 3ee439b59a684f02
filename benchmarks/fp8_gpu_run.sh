#!/bin/bash
# issue 14, the H100 run of docs/benchmarks.md (float8 section), from a copy of the tree in .gpu/i14 (device tool: carry .gpu/i14; bash .gpu/i14/run_gpu2.sh). Output goes to $OUT.
cd "$(dirname "$0")"; exec > >(tee $OUT/log.txt) 2>&1
export PYTHONPATH=. PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.94
NT=--xla_gpu_enable_triton_gemm=false
mkdir -p /tmp/hlo_default /tmp/hlo_notriton
uptime; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
P="benchmarks/fp8_gemm_probe.py --rows 8192 --k 2048 --n 2048"
timeout 45 python3 $P --out $OUT/probe_default.json 2>&1 | grep -v "^W0\|Warning"
XLA_FLAGS=$NT timeout 45 python3 $P --out $OUT/probe_notriton.json 2>&1 | grep -v "^W0\|Warning"
T="benchmarks/train_throughput.py --device gpu --no-torch"
timeout 100 python3 $T --models llama_1b --batch 4 --seq 2048 --steps 5 --warmup 2 --repeats 5 \
  --precisions bf16,fp8 --out $OUT/fp8_1b_gpu.json --hlo-dir /tmp/hlo_default 2>&1 | grep -v "^W0\|Warning"
XLA_FLAGS=$NT timeout 100 python3 $T --models llama_1b --batch 4 --seq 2048 --steps 5 --warmup 2 --repeats 5 \
  --precisions bf16,fp8 --out $OUT/fp8_1b_gpu_notriton.json --hlo-dir /tmp/hlo_notriton 2>&1 | grep -v "^W0\|Warning"
timeout 60 python3 $T --models llama_nano --batch 8 --seq 512 --steps 10 --warmup 2 --repeats 5 \
  --precisions bf16,fp8,fp8_delayed --out $OUT/fp8_nano_gpu.json 2>&1 | grep -v "^W0\|Warning"
tar czf $OUT/hlo.tar.gz -C /tmp hlo_default hlo_notriton
uptime; echo done
