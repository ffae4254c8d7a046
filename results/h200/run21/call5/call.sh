#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 330 python3 scripts/gpu_bench.py --quant-shapes --out $OUT/c/shapes > $OUT/c/shapes.log 2>&1; echo "shapes rc=$? $((SECONDS-t0))s"; tail -14 $OUT/c/shapes.log
timeout 120 python3 scripts/probe_quant_delayed.py $OUT/c/delayed.json > $OUT/c/delayed.log 2>&1; echo "delayed rc=$? $((SECONDS-t0))s"; grep -v "^{" $OUT/c/delayed.log | tail -8
timeout 40 python3 -m pytest -q tests/test_kernels_quantize_delayed.py -p no:cacheprovider > $OUT/c/tests.log 2>&1; echo "tests rc=$? $((SECONDS-t0))s"; tail -1 $OUT/c/tests.log
cd $OUT && tar czf c.tgz c && rm -rf c
