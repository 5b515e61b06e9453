"""live_calls.py PLAIN_PORT KEYED_PORT CLIENT_KEY: real calls (page clients v1-v4, splitrpc v5) for the capture."""
import json, os, struct, sys, time
sys.path.insert(0, "/work/main/tests")
from foreign_client import ForeignClient, RemoteError
import splitrpc
pp, kp, ck = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
k = json.load(open(ck)); sec = bytes.fromhex(k["secret"])
VEC = struct.pack("<128f", *range(128)) + struct.pack("<128f", *[1.0] * 128)  # 1024 bytes: 2 segments at 1000
for v in (1, 2, 3):
    c = ForeignClient("127.0.0.1", pp, version=v, seg_size=1000)
    c.describe()
    c.call(1, VEC)                                 # 2048 bytes: 3 segments at 1000
    big = os.urandom(5000); assert c.call(3, big) == big
    try: c.call(99, b"x")
    except RemoteError as e: print("v%d unknown:" % v, e.code)
    c.close()
c = ForeignClient("127.0.0.1", kp, version=4, key=(k["id"], sec), seg_size=1000)
c.call(1, VEC); assert c.call(3, b"abc" * 900) == b"abc" * 900; c.close()

for kw in ({}, {"encrypt": True}):
    cl = splitrpc.Client("127.0.0.1", kp, key=ck, **kw)
    cl.describe(); cl.call(1, VEC); cl.call(3, os.urandom(4000)); cl.close()
print("ok")
