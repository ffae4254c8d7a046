#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so
export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
t0=$SECONDS
timeout 250 python3 -m pytest -q tests/test_kernels_attention_ws.py -p no:cacheprovider -rs > $OUT/c/tests_ws.log 2>&1; echo "ws tests rc=$? $((SECONDS-t0))s"
tail -3 $OUT/c/tests_ws.log
t1=$SECONDS
timeout $((450-SECONDS)) python3 -m pytest -q tests/test_kernels_attention.py -p no:cacheprovider -rs > $OUT/c/tests_triton.log 2>&1; echo "triton tests rc=$? $((SECONDS-t1))s"
tail -3 $OUT/c/tests_triton.log
for nb in 04_fa2_fa3_version_gating 08_triton_fp8_attention; do
  t2=$SECONDS
  FP8LAB_FIGURES=$OUT/c/fig_$nb.json timeout $((575-SECONDS)) python3 -c "from fp8lab import notebooks; notebooks.run_script('$nb')" > $OUT/c/nb_$nb.log 2>&1; echo "$nb rc=$? $((SECONDS-t2))s"
  tail -2 $OUT/c/nb_$nb.log
done
cd $OUT && tar czf c.tgz c && rm -rf c
