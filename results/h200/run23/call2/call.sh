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
timeout 200 python3 -m pytest -q tests/test_gpu_backends.py -k "prepared or case_calls or captures" -p no:cacheprovider -rs > $OUT/c/new_tests.log 2>&1; echo "new tests rc=$? $((SECONDS-t0))s"; tail -3 $OUT/c/new_tests.log
for nb in 07_performance 05_fp8_attention_accuracy; do
  t=$SECONDS
  FP8LAB_FIGURES=$OUT/c/fig_$nb.json timeout 240 python3 -c "
from fp8lab import notebooks
notebooks.run_script('$nb')
print('NOTEBOOK OK')
" > $OUT/c/nb_$nb.log 2>&1
  echo "$nb rc=$? $((SECONDS-t))s (total $((SECONDS-t0))s) $(grep -c 'NOTEBOOK OK' $OUT/c/nb_$nb.log)"
done
grep -A12 "live, median" $OUT/c/nb_07_performance.log
grep -B2 -A3 "^live:\|no live" $OUT/c/nb_05_fp8_attention_accuracy.log | head
cd $OUT && tar czf c.tgz c && rm -rf c
