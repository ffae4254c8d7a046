#!/bin/bash
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
timeout 150 python3 -c "
import time
from fp8lab import notebooks
for s in notebooks.MANIFEST:
    t = time.time()
    try:
        notebooks.run_script(s.name, smoke=True); print('ok    ', s.name, round(time.time() - t, 1), 's', flush=True)
    except Exception as e:
        print('FAILED', s.name, str(e)[:300], flush=True)
" > /tmp/nb.log 2>&1; echo "rc=$?"
grep -E "^(ok|FAILED) " /tmp/nb.log
cp /tmp/nb.log $OUT/notebooks.log
