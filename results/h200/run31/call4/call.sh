#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
export PYTHONPATH=$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.version.cuda)"; git log --oneline -1; git status --short) > $OUT/c/gpu.txt 2>&1
( t0=$SECONDS; timeout 150 python3 scripts/probe_quant_prelude.py $OUT/c/bench_v35_quant_prelude.json > $OUT/c/prelude.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/prelude.log )
date -u >> $OUT/c/gpu.txt
tail -34 $OUT/c/prelude.log
cd $OUT && tar czf c.tgz c && rm -rf c
