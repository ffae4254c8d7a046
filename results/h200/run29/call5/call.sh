#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so
export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
export PYTHONPATH=/tmp/site:$PWD:$PWD/scripts PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(date -u; nvidia-smi --query-gpu=name,driver_version --format=csv; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)"; git status --short) > $OUT/c/gpu.txt 2>&1
for nb in 05_fp8_attention_accuracy 06_fp8_kv_cache; do
  ( t0=$SECONDS; timeout 250 python3 -c "from fp8lab import notebooks; notebooks.run_script('$nb')" > $OUT/c/nb_$nb.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/nb_$nb.log ) &
done
wait
for f in $OUT/c/*.log; do echo "== $(basename $f)"; grep -v "it/s\]" $f | tail -8; done
