#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
export PYTHONPATH=$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(date -u; nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.version.cuda)"; git log --oneline -1; git status --short) > $OUT/c/gpu.txt 2>&1
t0=$SECONDS; timeout 300 python3 scripts/probe_quant_skew.py $OUT/c/bench_v37_quant_skew.json > $OUT/c/skew.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/skew.log
date -u >> $OUT/c/gpu.txt
cut -c1-160 $OUT/c/skew.log
cd $OUT && tar czf c.tgz c && rm -rf c
