#!/bin/bash
# the attention grid again (v12's kernels, on this session's code): every provider, one median each
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
{ nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
python3 -m fp8lab.cli doctor > "$OUT/doctor.txt" 2>&1
timeout 420 python3 scripts/gpu_bench.py --v11-grid --budget 400 --out $OUT > $OUT/grid.log 2>&1; echo "rc=$?" >> $OUT/grid.log
tail -25 $OUT/grid.log
