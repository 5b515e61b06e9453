"""mkseg2.py OUT.pcap: segments each plausible alone but not together (msg_len 25, nseg 3: 10 + 9 + 5 = 24 bytes),
and a last segment that arrives first with a different size than the others imply."""
import os, sys
sys.path.insert(0, os.path.dirname(__file__))
from mkpcaps import pcap, hdr
L = [hdr(2, 0, rid=0xA1, seq=0, nseg=3, mlen=25) + b"A" * 10,
     hdr(2, 0, rid=0xA1, seq=1, nseg=3, mlen=25) + b"B" * 9,
     hdr(2, 0, rid=0xA1, seq=2, nseg=3, mlen=25) + b"C" * 5,
     # second message: seg sizes 12 and 13 for msg_len 25 nseg 2 (S=12 from seg0 -> last must be 13? (25-13)/1=12 ok) but seg0 of 13 says S=13
     hdr(2, 0, rid=0xA2, seq=0, nseg=2, mlen=25) + b"D" * 13,
     hdr(2, 0, rid=0xA2, seq=1, nseg=2, mlen=25) + b"E" * 13]
pcap(sys.argv[1], L)
