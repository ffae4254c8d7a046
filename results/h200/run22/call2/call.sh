#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 90 python3 scripts/probe_api_graph.py $OUT/c/api_graph.json > $OUT/c/api_graph.log 2>&1; echo "graph rc=$? $((SECONDS-t0))s"; grep "{" $OUT/c/api_graph.log | cut -c1-200
timeout 200 python3 -m pytest -q tests/test_gpu_backends.py -p no:cacheprovider -rs > $OUT/c/gpu_backends.log 2>&1; echo "gpu_backends rc=$? $((SECONDS-t0))s"; tail -4 $OUT/c/gpu_backends.log
timeout 150 python3 scripts/probe_quant_delayed.py --sizes $OUT/c/sizes.json > $OUT/c/sizes.log 2>&1; echo "sizes rc=$? $((SECONDS-t0))s"; grep delayed $OUT/c/sizes.log | tail -12
timeout 60 python3 -m pytest -q tests/test_kernels_quantize_delayed.py -p no:cacheprovider > $OUT/c/tests.log 2>&1; echo "tests rc=$? $((SECONDS-t0))s"; tail -1 $OUT/c/tests.log
cd $OUT && tar czf c.tgz c && rm -rf c
