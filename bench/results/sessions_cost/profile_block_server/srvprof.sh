# srvprof.sh: per-call CPU of a blocking server, by symbol: unkeyed (v1) vs authenticated vs encrypted, the independent client spinning
S=/work/main/.venv/bin/splitrpc; C=/work/main/.venv/lib/python3.11/site-packages/splitrpc/bench/clients/indep_client
N=${N:-100000}  # run from a folder holding keys.json and client.json of one key (splitrpc keys new)
for v in u a e; do
  if [ $v = u ]; then $S serve --port 47011 --wait block >/tmp/exp/sp.log 2>&1 & else $S serve --port 47011 --wait block --keys /tmp/exp/keys.json >/tmp/exp/sp.log 2>&1 & fi
  P=$!; sleep 4
  case $v in u) X="";; a) X="--v5 client.json --aes --libsodium /work/main/.venv/lib/python3.11/site-packages/nacl/_sodium.abi3.so";; e) X="--v5 client.json --aes --encrypt --libsodium /work/main/.venv/lib/python3.11/site-packages/nacl/_sodium.abi3.so";; esac
  perf record -q -o /tmp/exp/srv.$v.data -e cpu-clock -F 20000 -p $P -- sleep 30 >/dev/null 2>&1 &
  R=$!; sleep 1
  LD_PRELOAD=/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0 $C --port 47011 --mode spin --outstanding 1 --calls $N --warmup 1000 --func 1 --check --json $X | python3 -c "import json,sys;d=json.load(sys.stdin);print('$v', d['ok'], d['p50_us'], d['elapsed_s'])"
  kill -INT $R; wait $R; kill $P; wait $P
done
