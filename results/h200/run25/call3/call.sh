#!/usr/bin/env bash
set -u
mkdir -p $OUT/c
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl > /dev/null 2>&1
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so
export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
cp scripts/_call.sh $OUT/c/call.sh
(nvidia-smi; python3 -c "import torch,triton;print(torch.__version__,triton.__version__)") > $OUT/c/gpu.txt 2>&1
python3 scripts/probe_casts.py cuda $OUT/c/cast_probe_h200.json > $OUT/c/cast_probe.log 2>&1
run() {  # name, command...
  local name=$1; shift
  ( t0=$SECONDS; timeout 560 "$@" > $OUT/c/$name.log 2>&1; echo "rc=$? $((SECONDS-t0))s" >> $OUT/c/$name.log ) &
}
WS=tests/test_kernels_attention_ws.py
P="python3 -m pytest -q -p no:cacheprovider -rs"
run ws_a $P $WS -k "key_ordered or persistent or dynamic"
run ws_b $P $WS -k "not (key_ordered or persistent or dynamic)"
run backends $P tests/test_gpu_backends.py
nbs() {
  $P tests/test_kernels_attention.py tests/test_kernels_vlayout.py tests/test_kvcache.py tests/test_notebooks.py
  for nb in 00_quickstart 03_per_head_scales_and_strides 06_fp8_kv_cache 08_triton_fp8_attention 07_performance; do
    t=$SECONDS; FP8LAB_FIGURES=$OUT/c/fig_$nb.json python3 -c "from fp8lab import notebooks; notebooks.run_script('$nb', smoke=False)" > $OUT/c/nb_$nb.log 2>&1
    echo "$nb rc=$? $((SECONDS-t))s"
  done
}
export -f nbs
export P OUT
run attn_nbs bash -c nbs
wait
for f in $OUT/c/*.log; do echo "== $(basename $f)"; tail -3 $f; done
cd $OUT && tar czf c.tgz c && rm -rf c
