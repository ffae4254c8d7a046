#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so
export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
for nb in 01_fp8_numerics 02_scale_strategies 04_fa2_fa3_version_gating 05_fp8_attention_accuracy; do
  t=$SECONDS; FP8LAB_FIGURES=$OUT/c/fig_$nb.json timeout 400 python3 -c "from fp8lab import notebooks; notebooks.run_script('$nb', smoke=False)" > $OUT/c/nb_$nb.log 2>&1
  echo "$nb rc=$? $((SECONDS-t))s"
done
for f in $OUT/c/nb_*.log; do echo "== $(basename $f)"; tail -4 $f; done
cd $OUT && tar czf c.tgz c && rm -rf c
