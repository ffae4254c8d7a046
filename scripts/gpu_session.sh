#!/usr/bin/env bash
# One call on a Hopper host: everything the GPU must confirm, each step time-limited.
#   bash scripts/gpu_session.sh OUT_DIR
# Expects .gpu/ (git-ignored) with the fa3-fwd wheel, vLLM's _vllm_fa3_C.abi3.so.xz
# and optionally more wheels (e.g. seaborn) for packages the host lacks.
set -u
OUT=${1:?usage: gpu_session.sh OUT_DIR}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
xz -dc .gpu/_vllm_fa3_C.abi3.so.xz > /tmp/_vllm_fa3_C.abi3.so && export FP8LAB_VLLM_FA3_LIB=/tmp/_vllm_fa3_C.abi3.so
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
python3 -m fp8lab.cli doctor > "$OUT/doctor.txt" 2>&1

step() {  # step NAME SECONDS CMD...: run, log, report
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: rc=$? in $((SECONDS - t0)) s (limit $limit)" | tee -a "$OUT/steps.txt"
  tail -n 3 "$OUT/$name.log"
}

# 1. The package's own GPU tests: formats on CUDA, reference on CUDA, the Gluon kernel; the Triton
# attention kernel's file whole (its unmarked tests run on the GPU too, with GPU bounds).
# (the GPU host has no papermill/nbformat: the notebooks run as scripts in step 3 instead)
# On the H200 (run14): about 185 s without the quantization file, which takes about 130 s more.
step gpu_unit 480 python3 -m pytest -q -m "gpu or hopper" tests --ignore=tests/test_gpu_backends.py \
  --ignore=tests/test_notebooks.py --ignore=tests/test_kernels_attention.py \
  -p no:cacheprovider --junitxml="$OUT/gpu_unit.xml"
step kernels_attention 140 python3 -m pytest -q tests/test_kernels_attention.py -p no:cacheprovider
# 2. The production-kernel grid, FP8 part (descales, q_scale fallback, lse bound).
step gpu_backends 130 python3 scripts/gpu_backends.py --out "$OUT" --budget 110 -k "fp8 or descale or q_scale"
# 3. Every notebook as a script at smoke sizes, on the GPU.
step notebooks 140 python3 -c "
import time
from fp8lab import notebooks
for s in notebooks.MANIFEST:
    t = time.time()
    try:
        notebooks.run_script(s.name, smoke=True); print('ok    ', s.name, round(time.time() - t, 1), 's', flush=True)
    except Exception as e:
        print('FAILED', s.name, str(e)[:300], flush=True)
"
cat "$OUT/steps.txt"
# the device tool returns at most 8 files: everything also goes back as one archive
tar -czf /tmp/session.tgz -C "$OUT" . && mv /tmp/session.tgz "$OUT/session.tgz"
