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
timeout 200 python3 -m pytest -q tests/test_kernels_attention_ws.py -k "halves or (matches_emulation and 256)" tests/test_gpu_backends.py::test_pv_flush_through_the_api_runs_our_kernels_with_the_flush -p no:cacheprovider -rs > $OUT/c/tests.log 2>&1; echo "tests rc=$? $((SECONDS-t0))s"
tail -4 $OUT/c/tests.log
t1=$SECONDS
timeout 200 python3 scripts/probe_pv_flush.py $OUT/c --timing --dims 256 > $OUT/c/probe_timing.log 2>&1; echo "timing rc=$? $((SECONDS-t1))s"
python3 - <<'PY'
import json, statistics as st, collections, os
d=json.load(open(os.environ["OUT"]+"/c/timing.json")); rows=d.get("rows", d)
by=collections.defaultdict(list)
for r in rows:
    if "tflops" in r: by[(r["case"], r["provider"])].append(r["tflops"])
    elif "error" in r: print("ERR", r["case"], r["provider"], r["error"][:300])
for (c,p),v in by.items(): print(f"{c:22s} {p:45s} {st.median(v):7.0f}")
PY
t2=$SECONDS
timeout $((570-SECONDS)) python3 scripts/probe_pv_flush.py $OUT/c --accuracy --head-dim 256 > $OUT/c/probe_acc.log 2>&1; echo "accuracy rc=$? $((SECONDS-t2))s"
grep "rel_l2\|error" $OUT/c/probe_acc.log | grep -v Warning | cut -c1-150 | tail -40
cd $OUT && tar czf c.tgz c && rm -rf c
