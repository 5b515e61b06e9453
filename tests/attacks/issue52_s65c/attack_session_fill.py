"""ATTACK (stop 65c, aside): fill the table of SESSIONS (4,096) with several keys, no tombstones needed.
security.md: "A server holds 4,096 sessions; once half are taken, one key holds at most a quarter of them.
A new session then takes the place of a session its client has moved on from, or of one silent for 2 s
whose calls are all answered." So sessions that are never silent for 2 s are never taken. The first key
can take half (the limit starts at half), each further key a quarter: three keys can hold all 4,096.
Each flooder session is touched (one datagram of an unknown function, never run) at least once a second.

Phases: key 3 alone makes sessions until it gets no more; probe key 1 (PROBE INITs, one session each:
how many answered?); then keys 4 and 5 make sessions until they get no more; probe key 1 again.
Usage: ATTACK_DIR=DIR python attack_session_fill.py PORT [PROBE]     Who: holder of keys 3, 4, 5 (not 1)."""
import sys, os, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "issue52_s65"))
from common import *
import common


def stats(port):
    for i in range(3):
        common._obs.clear()
        try:
            r = common.stats(port)
        except TimeoutError:  # the observer's (key 2's) INIT went unanswered: record it
            r = None; print("  (observer, key 2: INIT unanswered)", flush=True)
        if r: return r
    return {}


PORT = int(sys.argv[1]); PROBE = int(sys.argv[2]) if len(sys.argv) > 2 else 100
ins = {k: Insider(PORT, key=load_client(os.path.join(AD, f"client{k}.json"))) for k in (3, 4, 5)}


def touch():
    for i in ins.values():
        i.touch_all()


def fill(k):
    got = 0
    while True:
        g = ins[k].flood(256, keep=True, gap=0.001); got += len(g); touch()
        if len(g) < 8:
            return got


def probe(label):
    p = Insider(PORT, key=load_client(os.path.join(AD, "client.json")))
    got = p.flood(PROBE, keep=False, gap=0.002)
    touch()
    print(f"{label}: key 1 got {len(got)} sessions for {PROBE} INITs", flush=True); print("  stats:", stats(PORT), flush=True)


t0 = time.monotonic()
print("before:", stats(PORT))
print("key 3 made", fill(3), "sessions:", stats(PORT), flush=True)
probe("one other key (3) at its limit")
print("key 4 made", fill(4), "; key 5 made", fill(5), ":", stats(PORT), flush=True)
probe("three other keys (3, 4, 5) at their limits")
for r in range(5):  # keep the flooders' sessions alive a few seconds more, probe once more
    time.sleep(0.5); touch()
probe("again, 2.5 s later")
print(f"done at +{time.monotonic()-t0:.0f}s; flooder sessions held: {[len(i.mine) for i in ins.values()]}")
