#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so
export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 200 python3 -m pytest -q -x tests/test_kernels_attention.py tests/test_kernels_attention_ws.py -k "pv_flush or pv_accumulation or matches_emulation" -p no:cacheprovider > $OUT/c/tests.log 2>&1; echo "tests rc=$? $((SECONDS-t0))s"
tail -5 $OUT/c/tests.log
t1=$SECONDS
timeout $((560-SECONDS)) python3 scripts/probe_pv_flush.py $OUT/c --accuracy --timing > $OUT/c/probe.log 2>&1; echo "probe rc=$? $((SECONDS-t1))s"
grep -v Warning $OUT/c/probe.log | grep -v "round': [12]" | tail -60
cd $OUT && tar czf c.tgz c && rm -rf c
