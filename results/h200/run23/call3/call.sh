#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
python3 -m fp8lab.cli doctor > $OUT/c/doctor.txt 2>&1
t0=$SECONDS
timeout 120 python3 scripts/probe_api_overhead.py $OUT/c/api_overhead.json > $OUT/c/api_overhead.log 2>&1; echo "overhead rc=$? $((SECONDS-t0))s"
timeout 90 python3 -m pytest -q tests/test_backends.py tests/test_bench.py tests/test_layout.py tests/test_gating.py tests/test_emulation.py -p no:cacheprovider > $OUT/c/cpu_tests_on_gpu_host.log 2>&1; echo "unmarked tests rc=$? $((SECONDS-t0))s"; tail -1 $OUT/c/cpu_tests_on_gpu_host.log
timeout 330 python3 -m pytest -q tests/test_gpu_backends.py -p no:cacheprovider -rs > $OUT/c/gpu_backends.log 2>&1; echo "gpu backends rc=$? $((SECONDS-t0))s"; tail -1 $OUT/c/gpu_backends.log
cd $OUT && tar czf c.tgz c && rm -rf c
