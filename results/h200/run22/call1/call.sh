#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 420 python3 scripts/probe_quant_delayed.py --tune $OUT/c/tune.json > $OUT/c/tune.log 2>&1; echo "tune rc=$? $((SECONDS-t0))s"; grep -c delayed $OUT/c/tune.log; grep check $OUT/c/tune.log | grep -c "False"
timeout 60 python3 -m pytest -q tests/test_kernels_quantize_delayed.py -p no:cacheprovider > $OUT/c/tests.log 2>&1; echo "tests rc=$? $((SECONDS-t0))s"; tail -1 $OUT/c/tests.log
cd $OUT && tar czf c.tgz c && rm -rf c
