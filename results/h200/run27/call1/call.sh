#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so; export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
export PYTHONPATH=/tmp/site:$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 300 python3 -m pytest -q tests/test_kernels_attention_ws.py -k "transpose_v" -p no:cacheprovider -rs --durations=5 > $OUT/c/tests_tv.log 2>&1; echo "tv tests rc=$? $((SECONDS-t0))s"
tail -12 $OUT/c/tests_tv.log
t0=$SECONDS
timeout 240 python3 scripts/probe_transpose_v.py $OUT/c --timing --rounds 3 --dims 256 > $OUT/c/timing256.log 2>&1; echo "timing rc=$? $((SECONDS-t0))s"
tail -12 $OUT/c/timing256.log
cd $OUT && tar czf c.tgz c && rm -rf c
