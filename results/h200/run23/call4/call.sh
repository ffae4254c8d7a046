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
timeout 530 python3 -m pytest -q -rs tests/test_data.py tests/test_doctor.py tests/test_env_cli.py tests/test_formats.py tests/test_kvcache.py tests/test_metrics.py tests/test_notebook_figures.py tests/test_packaging.py tests/test_reference.py tests/test_scaling.py tests/test_transforms.py tests/test_emulation.py tests/test_backends.py tests/test_bench.py tests/test_layout.py tests/test_gating.py tests/test_kernels_vlayout.py tests/test_kernels_attention_ws.py tests/test_kernels_quantize_delayed.py tests/test_kernels_attention.py tests/test_kernels_quantize.py -p no:cacheprovider --durations=12 > $OUT/c/tests.log 2>&1; echo "tests rc=$? $((SECONDS-t0))s"; grep -E "passed|failed" $OUT/c/tests.log | tail -2; grep FAILED $OUT/c/tests.log | head
cd $OUT && tar czf c.tgz c && rm -rf c
