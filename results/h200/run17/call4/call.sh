#!/bin/bash
# run17 call 4: a second comparison of the tile counter against fixed lists (non-causal) and one program per tile (causal), the committed code, two rounds
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
Q=$(python3 -c "from fp8lab.bench import CLOCK_LOG_QUERY; print(CLOCK_LOG_QUERY)")
nvidia-smi --query-gpu=$Q --format=csv -lms 250 > $OUT/clocks.csv 2>&1 &
SMI=$!
C="64:ws-n128s3-pw-c3-ps-kv,64:ws-n128s3-pw-c3-ps-dy-kv,64c:ws-n128s3-pw-c3-kv,64c:ws-n128s3-pw-c3-ps-dy-kv"
C="$C,128:ws-n128s4-pw-ps-kv,128:ws-n128s4-pw-ps-dy-kv,128c:ws-n128s3-pw-kv,128c:ws-n128s3-pw-ps-dy-kv"
C="$C,256:ws-n128s3-pw-ps-kv,256:ws-n128s3-pw-ps-dy-kv,256c:ws-n128s3-pw-kv,256c:ws-n128s3-pw-ps-dy-kv"
timeout 400 python3 scripts/gpu_bench.py --v11 --old none --dims 64,128,256 --ws-candidates "$C" --repeats 2 --budget 385 --out $OUT > $OUT/bench.log 2>&1; echo "rc=$?" >> $OUT/bench.log
kill $SMI
tail -22 $OUT/bench.log
ls $OUT
