#!/bin/bash
# Held check: a stub written from a running server with the built-in services (and a function of
# 64 floats, into path) imports, calls through invoke (the into path), and passes mypy --strict.
# Run: bash tests/attacks/issue53_s67/h2_stub.sh  (from anywhere; works in /tmp/a53/stub)
PY=/work/main/.venv/bin/python; D=/tmp/a53/stub; rm -rf $D; mkdir -p $D; cd $D
cat > serve.py <<'PYEOF'
import sys, time, splitrpc
from splitrpc import TensorSpec
from splitrpc.services import register_builtin_services
srv = splitrpc.Server("127.0.0.1", 0, wait="block"); register_builtin_services(srv)
@srv.function(300, "self", inputs=[TensorSpec("self", "float32", (64,)), TensorSpec("timeout", "int8", (4,))],
              outputs=[TensorSpec("y", "float32", (64,))])
def f(s, t, y): y[:] = s + t[:, :1]
srv.start(); open(sys.argv[1], "w").write(str(srv.port)); time.sleep(60); srv.close()
PYEOF
$PY serve.py $D/port & SP=$!
for i in $(seq 50); do [ -s $D/port ] && break; sleep 0.2; done; P=$(cat $D/port)
timeout 30 $PY -m splitrpc stub 127.0.0.1:$P --module svc 2>&1 | tail -2
PORT=$P timeout 30 $PY -c "
import os, numpy as np, splitrpc, svc
c = splitrpc.Client('127.0.0.1', int(os.environ['PORT']), timeout=2)
s = svc.Service(c)
y = s.vecadd(np.ones(256, np.float32)).y
print('vecadd', y[:3], y.flags.owndata, y.flags.writeable)
r = s.self(np.ones(64, np.float32), np.full(4, 2, np.int8), timeout=None)
print('self/timeout inputs:', [n for n in vars(svc.Service) if not n.startswith('_')][:12], r and r.y[:3])
" 2>&1 | tail -4
[ -n "$NOMYPY" ] || timeout 170 $PY -m mypy --strict --no-incremental --cache-dir=/dev/null svc.py 2>&1 | tail -3
kill $SP; wait $SP 2>/dev/null
