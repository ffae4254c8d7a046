#!/bin/bash
# run16 call 1: the Gluon kernel with persistent programs (one per SM) against one program per tile
set -u
# fp8lab/kernels/_v12_attention_ws.py: commit c3b2016's fp8lab/kernels/attention_ws.py (git show), for --old v12
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, torch.version.cuda, sys.version)"; } > $OUT/gpu.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $OUT/clocks.csv 2>&1 &
SMI=$!
timeout 240 python3 -m pytest -q -x -m gpu tests/test_kernels_attention_ws.py -p no:cacheprovider > $OUT/tests.log 2>&1; echo "rc=$?" >> $OUT/tests.log
tail -3 $OUT/tests.log
C="64:ws-n128s3-pw-c3-kv,64:ws-n128s3-pw-c3-ps-kv,64c:ws-n128s3-pw-c3-kv,64c:ws-n128s3-pw-c3-ps-kv"
C="$C,128:ws-n128s4-pw-kv,128:ws-n128s4-pw-ps-kv,128c:ws-n128s3-pw-kv,128c:ws-n128s3-pw-ps-kv"
C="$C,256:ws-n128s3-pw-kv,256:ws-n128s3-pw-ps-kv,256c:ws-n128s3-pw-kv,256c:ws-n128s3-pw-ps-kv"
timeout 340 python3 scripts/gpu_bench.py --v11 --old v12 --ws-candidates "$C" --repeats 3 --budget 320 --out $OUT > $OUT/bench.log 2>&1; echo "rc=$?" >> $OUT/bench.log
kill $SMI
tail -40 $OUT/bench.log
ls $OUT
