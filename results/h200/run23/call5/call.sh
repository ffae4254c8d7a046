#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/fa3_fwd-0.0.3-cp39-abi3-manylinux_2_24_x86_64.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 130 python3 scripts/probe_long_context.py $OUT/c/long_context.json 2048,16384,65536 > $OUT/c/long_context.log 2>&1; echo "probe rc=$? $((SECONDS-t0))s"
cat $OUT/c/long_context.log | grep -v Warning | tail -24
cd $OUT && tar czf c.tgz c && rm -rf c
