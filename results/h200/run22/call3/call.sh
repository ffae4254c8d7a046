#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 120 python3 -m pytest -q tests/test_gpu_backends.py -k "captures" -p no:cacheprovider -rs > $OUT/c/capture_tests.log 2>&1; echo "capture tests rc=$? $((SECONDS-t0))s"; tail -12 $OUT/c/capture_tests.log | cut -c1-250
timeout 240 python3 scripts/probe_quant_delayed.py --tune $OUT/c/tune.json > $OUT/c/tune.log 2>&1; echo "tune rc=$? $((SECONDS-t0))s"; grep check $OUT/c/tune.log | grep -c False
timeout 60 python3 -c "
import sys, pytest
import fp8lab.kernels.quantize as Q
Q.DELAYED_PREFETCH = True
sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', 'tests/test_kernels_quantize_delayed.py']))" > $OUT/c/tests_prefetch.log 2>&1; echo "prefetch tests rc=$? $((SECONDS-t0))s"; tail -1 $OUT/c/tests_prefetch.log
cd $OUT && tar czf c.tgz c && rm -rf c
