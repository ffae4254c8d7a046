#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 200 python3 scripts/probe_quant_delayed.py --sizes $OUT/c/sizes.json > $OUT/c/sizes.log 2>&1; echo "sizes rc=$? $((SECONDS-t0))s"; tail -3 $OUT/c/sizes.log
cd $OUT && tar czf c.tgz c && rm -rf c
