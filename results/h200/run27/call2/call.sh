#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so; export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
export PYTHONPATH=/tmp/site:$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh; git diff > $OUT/c/uncommitted.patch
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 200 python3 scripts/probe_transpose_v.py $OUT/c --check --forms > $OUT/c/check.log 2>&1; echo "check rc=$? $((SECONDS-t0))s"
tail -3 $OUT/c/check.log; grep -c "'out_equal': True, 'lse_equal': True" $OUT/c/check.log; grep -v "'out_equal': True, 'lse_equal': True" $OUT/c/check.log | head -5 | cut -c1-300
t0=$SECONDS
timeout 370 python3 scripts/probe_transpose_v.py $OUT/c --timing --forms --rounds 3 > $OUT/c/timing.log 2>&1; echo "timing rc=$? $((SECONDS-t0))s"
cat $OUT/c/timing.log | grep "^[0-9]x" | cut -c1-1500
cd $OUT && tar czf c.tgz c && rm -rf c
