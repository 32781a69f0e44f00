#!/usr/bin/env python3
"""Writes, as RESP on stdout, the data sets of the bigger-than-memory run
(docs/results/serve-bigger-than-memory.md) and the expiry run
(docs/results/serve-expiry.md), for `redis-cli --pipe`:

  hashes  N hashes h:000000000000.. of ten fields f0..f9, 32-byte hex values
  zset    one sorted set z of N members m00000000.., scores 0..999,999
  ttl     N strings ttl:00000000.. of 20 bytes, SET with PX of 1,000-10,000 ms

  scripts/big-data-resp.py hashes 1000000 > hashes.resp
  scripts/big-data-resp.py zset 10000000 > zset.resp
  scripts/big-data-resp.py ttl 1000000 > ttl.resp

A fixed seed makes every run write the same bytes."""
import random
import sys


def command(out, *args):
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))


def main():
    kind, n = sys.argv[1], int(sys.argv[2])
    rng = random.Random(1)
    out = sys.stdout.buffer
    if kind == "hashes":
        for i in range(n):
            args = [b"HSET", b"h:%012d" % i]
            for f in range(10):
                args += [b"f%d" % f, b"%032x" % rng.getrandbits(128)]
            command(out, *args)
    elif kind == "zset":
        # 100 members a command, as a loader would batch them.
        for start in range(0, n, 100):
            args = [b"ZADD", b"z"]
            for i in range(start, min(start + 100, n)):
                args += [b"%d" % rng.randrange(1_000_000), b"m%08d" % i]
            command(out, *args)
    elif kind == "ttl":
        for i in range(n):
            value = b"%020d" % rng.getrandbits(64)
            command(out, b"SET", b"ttl:%08d" % i, value, b"PX", b"%d" % rng.randint(1000, 10000))
    else:
        sys.exit("usage: big-data-resp.py hashes|zset|ttl N")


main()
