#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so
export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t1=$SECONDS
timeout 360 python3 scripts/probe_pv_flush.py $OUT/c --grid > $OUT/c/probe.log 2>&1; echo "grid rc=$? $((SECONDS-t1))s"
grep -v Warning $OUT/c/probe.log | tail -20
t0=$SECONDS
timeout 40 python3 -m pytest -q tests/test_kernels_attention.py -k "pv_accumulation" -p no:cacheprovider > $OUT/c/tests_pv.log 2>&1; echo "pv test rc=$? $((SECONDS-t0))s"
tail -2 $OUT/c/tests_pv.log
python3 -m pytest --co -q tests/test_gpu_backends.py -p no:cacheprovider 2>/dev/null | grep "::" | tail -30 > /tmp/ids
t0=$SECONDS
timeout $((575-SECONDS)) python3 -m pytest -q $(cat /tmp/ids) -p no:cacheprovider -rs > $OUT/c/tests_backends_tail.log 2>&1; echo "backend tail rc=$? $((SECONDS-t0))s"
tail -12 $OUT/c/tests_backends_tail.log
cd $OUT && tar czf c.tgz c && rm -rf c
