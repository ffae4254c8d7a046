#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so; export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
export PYTHONPATH=/tmp/site:$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh; git diff > $OUT/c/uncommitted.patch
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 470 python3 -m pytest -q tests/test_kernels_attention_ws.py -p no:cacheprovider -rs --durations=8 > $OUT/c/tests_ws.log 2>&1; echo "ws tests rc=$? $((SECONDS-t0))s"
tail -14 $OUT/c/tests_ws.log
t0=$SECONDS
timeout 60 python3 -m pytest -q tests/test_gpu_backends.py tests/test_kernels_attention.py -k "head_dim_16 or folded" -p no:cacheprovider -rs > $OUT/c/tests_checks.log 2>&1; echo "check tests rc=$? $((SECONDS-t0))s"
tail -2 $OUT/c/tests_checks.log
cd $OUT && tar czf c.tgz c && rm -rf c
