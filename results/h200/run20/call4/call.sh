#!/bin/bash
# run20 call 4: where fp8lab.attention's extra time goes; the one test call 3's time limit cut
set -u
python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
timeout 120 python3 scripts/_probe_overhead.py $OUT/probe_overhead.json > $OUT/probe.log 2>&1; echo "rc=$?" >> $OUT/probe.log
timeout 100 python3 -m pytest -v tests/test_kernels_attention_ws.py -k "key_ordered_v_gives and 256" > $OUT/tests.log 2>&1; echo "rc=$?" >> $OUT/tests.log
cp scripts/_call.sh $OUT/call.sh; cp scripts/_probe_overhead.py $OUT/probe_overhead.py
cat $OUT/probe.log; tail -3 $OUT/tests.log
