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
for nb in 00_quickstart 01_fp8_numerics 02_scale_strategies 03_per_head_scales_and_strides 04_fa2_fa3_version_gating 06_fp8_kv_cache 08_triton_fp8_attention 07_performance 05_fp8_attention_accuracy; do
  t=$SECONDS
  extra=""
  [ $nb = 07_performance ] && extra="run_live=True"
  FP8LAB_FIGURES=$OUT/c/fig_$nb.json timeout 150 python3 -c "
from fp8lab import notebooks
notebooks.run_script('$nb', $extra)
print('NOTEBOOK OK')
" > $OUT/c/nb_$nb.log 2>&1
  echo "$nb rc=$? $((SECONDS-t))s (total $((SECONDS-t0))s) $(grep -c 'NOTEBOOK OK' $OUT/c/nb_$nb.log)" | tee -a $OUT/c/steps.txt
  tail -2 $OUT/c/nb_$nb.log
  [ $((SECONDS-t0)) -gt 520 ] && break
done
cd $OUT && tar czf c.tgz c && rm -rf c
