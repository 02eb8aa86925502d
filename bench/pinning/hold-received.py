"""What holding a received libzmq message keeps in memory (docs/performance-history.md, "Issue 14:
moves instead of copies").

libzmq 4.3 receives without copying (ZMQ_ZERO_COPY_RECV, on by default): a message over 33 bytes
points into the buffer the decoder read a batch into, and keeps that whole buffer until it is
closed. This holds one message in EVERY of 200,000 and prints the resident memory per message
held. Needs pyzmq (python3-zmq): python3 hold-received.py SIZE EVERY, e.g. 64 100.
"""
import os, sys, tempfile
import zmq
def rss():
    for l in open('/proc/self/status'):
        if l.startswith('VmRSS'): return int(l.split()[1])
ctx = zmq.Context()
a = ctx.socket(zmq.PUSH); b = ctx.socket(zmq.PULL)
a.setsockopt(zmq.SNDHWM, 0); b.setsockopt(zmq.RCVHWM, 0)
endpoint = "ipc://" + os.path.join(tempfile.mkdtemp(), "pin")
b.bind(endpoint); a.connect(endpoint)
size = int(sys.argv[1]); every = int(sys.argv[2]); n = 200000
payload = b"x" * size
held = []
r0 = rss()
import threading
def send():
    for i in range(n): a.send(payload)
t = threading.Thread(target=send); t.start()
for i in range(n):
    f = b.recv(copy=False)
    if i % every == 0: held.append(f)
t.join()
r1 = rss()
print(f"size {size} hold 1 in {every}: {len(held)} held, RSS +{r1-r0} KiB, {1024*(r1-r0)/len(held):.0f} B per held message")
