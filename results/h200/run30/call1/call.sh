#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(date -u; nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)"; git log --oneline -1; git status --short) > $OUT/c/gpu.txt 2>&1
( t0=$SECONDS; timeout 420 python3 scripts/probe_quant_flush.py $OUT/c/bench_v34_quant_flush.json > $OUT/c/flush.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/flush.log )
date -u >> $OUT/c/gpu.txt
tail -40 $OUT/c/flush.log
cd $OUT && tar czf c.tgz c && rm -rf c
