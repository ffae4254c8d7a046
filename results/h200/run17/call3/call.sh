#!/bin/bash
# run17 call 3: the committed defaults (dynamic tiles non-causal at head dims 128 and 256); the tests that run defaults; the grid twice
set -u
# fp8lab/kernels/_v19_attention_ws.py: commit 3f90e40's fp8lab/kernels/attention_ws.py (git show), for --old v19
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
Q=$(python3 -c "from fp8lab.bench import CLOCK_LOG_QUERY; print(CLOCK_LOG_QUERY)")
nvidia-smi --query-gpu=$Q --format=csv -lms 250 > $OUT/clocks.csv 2>&1 &
SMI=$!
timeout 200 python3 -m pytest -q -x -m gpu tests/test_kernels_attention_ws.py -p no:cacheprovider -k "matches_emulation or key_ordered_v_gives" > $OUT/tests.log 2>&1; echo "rc=$?" >> $OUT/tests.log
tail -3 $OUT/tests.log
mkdir -p $OUT/g1 $OUT/g2
timeout 150 python3 scripts/gpu_bench.py --v11-grid --budget 140 --out $OUT/g1 > $OUT/g1/grid.log 2>&1; echo "rc=$?" >> $OUT/g1/grid.log
timeout 150 python3 scripts/gpu_bench.py --v11-grid --budget 140 --out $OUT/g2 > $OUT/g2/grid.log 2>&1; echo "rc=$?" >> $OUT/g2/grid.log
kill $SMI
tail -22 $OUT/g1/grid.log; tail -22 $OUT/g2/grid.log
ls $OUT
