#!/bin/bash
# run16 call 4: the grid again on the committed code (one median each), clocks logged
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $OUT/clocks.csv 2>&1 &
SMI=$!
timeout 150 python3 scripts/gpu_bench.py --v11-grid --budget 140 --out $OUT > $OUT/grid.log 2>&1; echo "rc=$?" >> $OUT/grid.log
kill $SMI
tail -22 $OUT/grid.log
