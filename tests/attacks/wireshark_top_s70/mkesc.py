"""mkesc.py OUT.pcap: a describe reply naming function 1 with terminal escapes, then a call to 1."""
import os, sys
sys.path.insert(0, os.path.dirname(__file__))
from mkpcaps import pcap, hdr
doc = b'{"describe":1,"functions":[{"id":1,"name":"\\u001b[2J\\u001b[31mPWNED\\u0007\\r\\nfake line"}]}'
pcap(sys.argv[1], [(hdr(2, 0, fid=0xFFFE, rid=1), 40006, 9230), (hdr(2, 1, fid=0xFFFE, rid=1, mlen=len(doc)) + doc, 9230, 40006),
                   (hdr(2, 0, fid=1, rid=2), 40006, 9230)])
