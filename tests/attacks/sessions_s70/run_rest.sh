#!/bin/bash
# attacks 4, 5a/5c/5d, 5b: a fresh cs.py server (LEGACY=1) for each script; run from /tmp
cd /tmp; P=/work/main/.venv/bin/python; export ATTACK_DIR=/tmp/atk70; unset PYTHONPATH
A=/tmp/atk70
one() { port=$1; shift; out=$1; shift
  LEGACY=1 $P $A/cs.py $port > $A/srv$port.log 2>&1 & sp=$!; sleep 2
  timeout 120 $P "$@" > $A/$out 2>&1; echo "rc=$?" >> $A/$out
  kill -TERM $sp; wait $sp; }
one 47910 reflect.out $A/reflect.py 47910
one 47920 flood.out $A/flood.py 47920 3000 20000
one 47930 cookie_addr.out $A/cookie_addr.py 47930
