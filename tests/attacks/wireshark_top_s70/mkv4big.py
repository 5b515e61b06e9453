"""mkv4big.py OUT.pcap N: N version 4 datagrams of 65000 bytes signed with keys.json's key (id 7)."""
import os, sys
sys.path.insert(0, os.path.dirname(__file__)); sys.path.insert(0, "/work/main/tests")
from mkpcaps import pcap, hdr
from foreign_client import v4_sign
n = int(sys.argv[2]); sec = bytes(range(32))
pcap(sys.argv[1], [v4_sign(hdr(4, 0, fid=3, rid=0x100 + i, mlen=64938) + os.urandom(64938), 7, sec, 1, i) for i in range(n)])
