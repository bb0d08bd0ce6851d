#!/usr/bin/python3
"""The README tour's job: it opens its GPU's node read-write and maps it
MAP_SHARED, as a CUDA job maps the driver's memory, then forks a worker that
leaves the job's session (setsid) and exits. The worker keeps the mapping and
the descriptor, as a DataLoader worker that outlives its job does, and writes
its PID to PIDFILE.

Usage: job.py NODE PIDFILE
"""
import mmap
import os
import signal
import sys

node, pidfile = sys.argv[1], sys.argv[2]
fd = os.open(node, os.O_RDWR)
gpu = mmap.mmap(fd, 65536, mmap.MAP_SHARED)
ready_r, ready_w = os.pipe()
if os.fork() == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for std in (0, 1, 2):
        os.dup2(null, std)
    with open(pidfile + ".tmp", "w") as f:
        f.write("%d\n" % os.getpid())
    os.rename(pidfile + ".tmp", pidfile)
    os.write(ready_w, b"x")
    while True:
        signal.pause()
os.close(ready_w)
os.read(ready_r, 1)
