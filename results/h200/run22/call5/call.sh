#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 90 python3 -c "
from fp8lab import notebooks
ns = notebooks.run_script('06_fp8_kv_cache')
print('live replay equals eager:', ns.get('same'))
" > $OUT/c/nb06.log 2>&1; echo "nb06 rc=$? $((SECONDS-t0))s"; grep -E "replay equals" $OUT/c/nb06.log | head -3
timeout 120 python3 -m pytest -q tests/test_gpu_backends.py -k "captures" -p no:cacheprovider -rs > $OUT/c/capture_tests.log 2>&1; echo "capture tests rc=$? $((SECONDS-t0))s"; tail -1 $OUT/c/capture_tests.log
timeout 60 python3 scripts/probe_api_graph.py $OUT/c/api_graph.json > $OUT/c/api_graph.log 2>&1; echo "graph rc=$? $((SECONDS-t0))s"; grep -c "'captured', 'replay_equals_eager': True" $OUT/c/api_graph.log
cd $OUT && tar czf c.tgz c && rm -rf c
