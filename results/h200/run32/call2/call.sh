#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(date -u; nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.version.cuda)"; git log --oneline -1; git status --short) > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 500 python3 -m pytest -q -p no:cacheprovider -rs --durations=8 tests/test_kernels_vlayout.py tests/test_kvcache.py tests/test_backends.py tests/test_scaling.py "tests/test_kernels_attention.py::test_descale_strides_are_bitwise_identical" "tests/test_kernels_quantize_delayed.py::test_stride0_descale_gives_the_materialized_bits" > $OUT/c/tests.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/tests.log
date -u >> $OUT/c/gpu.txt
tail -25 $OUT/c/tests.log
cd $OUT && tar czf c.tgz c && rm -rf c
