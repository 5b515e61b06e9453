import asyncio, threading, sys
sys.path.insert(0, "/tmp/review53")
from common import *
from splitrpc import aio
srv = server(); srv.start()
x = np.ones(256, np.float32); m = np.eye(32, dtype=np.float32)
# threads racing the first c.function on a fresh client
c = splitrpc.Client("127.0.0.1", srv.port, timeout=2.0)
out, errs = [], []
bar = threading.Barrier(8)
def w():
    bar.wait()
    try:
        for _ in range(25): out.append(float(c.function("vecadd")(x).y[0])); out.append(float(c.fn.matmul(m, b=m).c[0, 0]))
    except BaseException as ex: errs.append(repr(ex))
ts = [threading.Thread(target=w) for _ in range(8)]; [t.start() for t in ts]; [t.join() for t in ts]
print("threads: results", len(out), "all right", set(out) <= {2.0, 1.0}, "errors", errs[:2], "sent", c.stats()["sent_calls"], "(400 calls + describes)")
c.close()
# Pool
p = splitrpc.Pool([f"127.0.0.1:{srv.port}"], timeout=2.0)
attempt("pool vecadd idempotent", lambda: p.fn.vecadd(x, idempotent=True).y[:2].tolist())
attempt("pool batch", lambda: p.fn.vecadd(np.ones((3, 256), np.float32), idempotent=True).y.shape)
attempt("pool deadline kw", lambda: p.fn.vecadd(x, deadline=0.0))
attempt("pool reply writeable", lambda: p.fn.vecadd(x).y.flags.writeable)
attempt("pool echo", lambda: p.fn.echo(b"zz"))
p.close()
async def main():
    async with aio.Client("127.0.0.1", srv.port, timeout=2.0) as ac:
        async def a(label, coro):
            try: r = await coro; print(label + ": OK ->", summ(r))
            except BaseException as ex: print(f"{label}: {type(ex).__name__}: {str(ex)[:200]}")
        await a("aio vecadd", ac.fn.vecadd(x))
        await a("aio vecadd writeable?", (lambda: (lambda r: r.y.flags.writeable))() and asyncio.sleep(0))
        r = await ac.fn.vecadd(x); print("aio out writeable", r.y.flags.writeable, type(r.y.base))
        await a("aio function()", ac.function("matmul"))
        f = await ac.function("matmul")
        await a("aio matmul kw", f(m, b=m))
        await a("aio batch", ac.fn.vecadd(np.ones((5, 256), np.float32)))
        await a("aio missing", ac.fn.vecadd())
        await a("aio nosuch attr", ac.fn.nope(x))
        await a("aio nosuch fn", ac.function("nope"))
        await a("aio echo", ac.fn.echo(b"hey"))
        await a("aio deadline", ac.fn.vecadd(x, deadline=0.0))
        await a("aio cast", ac.fn.vecadd(np.ones(256, np.float16), cast=True))
        rs = await asyncio.gather(*[ac.fn.vecadd(x) for _ in range(200)])
        print("aio gather 200 ok:", all(float(r.y[0]) == 2.0 for r in rs))
        # cancellation of the first describe: does a later call still work?
    async with aio.Client("127.0.0.1", srv.port, timeout=2.0) as ac2:
        t = asyncio.ensure_future(ac2.fn.vecadd(x)); await asyncio.sleep(0); t.cancel()
        try: await t
        except asyncio.CancelledError: print("cancelled first call")
        r = await ac2.fn.vecadd(x); print("after cancel ok", float(r.y[0]))
    p2 = aio.Pool([f"127.0.0.1:{srv.port}"], timeout=2.0)
    try:
        r = await p2.fn.vecadd(x, idempotent=True); print("aio pool", float(r.y[0]), r.y.flags.writeable)
    finally:
        await p2.close() if asyncio.iscoroutinefunction(p2.close) else p2.close()
asyncio.run(main())
srv.stop()
