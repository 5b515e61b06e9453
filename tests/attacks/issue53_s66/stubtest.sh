#!/bin/bash
# stubtest.sh SCENARIO: serve it, write a stub, import it, mypy --strict it
S=$1; D=/tmp/review53/stub_$S; rm -rf $D; mkdir -p $D; cd $D
PY="/work/main/.venv/bin/python"; export PYTHONPATH=/tmp/inst66
LIFE=60 $PY /tmp/review53/serve_scenario.py $S $D/port & SP=$!
for i in $(seq 50); do [ -f $D/port ] && break; sleep 0.2; done
P=$(cat $D/port)
echo "== $S: stub"; timeout 30 $PY -m splitrpc stub 127.0.0.1:$P --module svc_$S 2>&1 | tail -3
echo "== import"; timeout 30 $PY -c "import svc_$S as m; print('imported; methods:', [n for n in vars(m.Service) if not n.startswith('__')])" 2>&1 | tail -3
echo "== mypy"; timeout 120 $PY -m mypy --strict --no-incremental --cache-dir=/dev/null svc_$S.py 2>&1 | tail -6
if [ -n "$2" ]; then echo "== extra"; PORT=$P timeout 30 $PY -c "$2" 2>&1 | tail -8; fi
kill $SP; wait $SP 2>/dev/null
