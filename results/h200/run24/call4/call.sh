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
timeout 200 python3 -m pytest -q tests/test_kernels_attention_ws.py -k "halves or (matches_emulation and 256)" "tests/test_gpu_backends.py::test_pv_flush_through_the_api_runs_our_kernels_with_the_flush[gluon]" -p no:cacheprovider -rs > $OUT/c/tests.log 2>&1; echo "tests rc=$? $((SECONDS-t0))s"
tail -4 $OUT/c/tests.log
t1=$SECONDS
timeout $((560-SECONDS)) python3 scripts/probe_pv_flush.py $OUT/c --grid --dims 256 > $OUT/c/probe_grid.log 2>&1; echo "grid rc=$? $((SECONDS-t1))s"
grep -v Warning $OUT/c/probe_grid.log | tail -8
cd $OUT && tar czf c.tgz c && rm -rf c
