#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(date -u; nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__,torch.version.cuda)"; git log --oneline -1; git status --short) > $OUT/c/gpu.txt 2>&1
S0=$SECONDS
t0=$SECONDS; timeout 220 python3 scripts/probe_quant_claims.py $OUT/c/bench_v37_quant_claims.json > $OUT/c/probe.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/probe.log
t0=$SECONDS; timeout $((440 - (SECONDS - S0))) python3 -m pytest -q -p no:cacheprovider -rs --durations=8 -k "onchip" tests/test_kernels_quantize.py > $OUT/c/tests_onchip.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/tests_onchip.log
t0=$SECONDS; timeout $((560 - (SECONDS - S0))) python3 -m pytest -q -p no:cacheprovider -rs --durations=8 -k "not onchip" tests/test_kernels_quantize.py > $OUT/c/tests_rest.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/tests_rest.log
date -u >> $OUT/c/gpu.txt
cat $OUT/c/probe.log | cut -c1-200
tail -4 $OUT/c/tests_onchip.log $OUT/c/tests_rest.log
cd $OUT && tar czf c.tgz c && rm -rf c
