#!/bin/bash
# run18 call 7: the grid twice on this session's code (attention unchanged since v21): a third and fourth v21 grid
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
Q=$(python3 -c "from fp8lab.bench import CLOCK_LOG_QUERY; print(CLOCK_LOG_QUERY)")
nvidia-smi --query-gpu=$Q --format=csv -lms 250 > $OUT/clocks.csv 2>&1 &
SMI=$!
mkdir -p $OUT/g1 $OUT/g2
timeout 150 python3 scripts/gpu_bench.py --v11-grid --budget 140 --out $OUT/g1 > $OUT/g1/grid.log 2>&1; echo "rc=$?" >> $OUT/g1/grid.log
timeout 100 python3 scripts/gpu_bench.py --v11-grid --budget 90 --out $OUT/g2 > $OUT/g2/grid.log 2>&1; echo "rc=$?" >> $OUT/g2/grid.log
kill $SMI
tail -22 $OUT/g1/grid.log; tail -22 $OUT/g2/grid.log
