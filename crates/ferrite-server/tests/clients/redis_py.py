"""redis-py against a ferrite server: plain commands, pipelines, a
transaction, SCAN iteration and RESP3. Exits non-zero on any mismatch."""
import sys

import redis

port = int(sys.argv[1])

r = redis.Redis(port=port)
r.flushall()
assert r.set("k", "v")
assert r.get("k") == b"v"
assert r.get("missing") is None
assert r.setnx("k", "w") is False
assert r.incr("n") == 1 and r.incrby("n", 9) == 10
assert r.incrbyfloat("f", 1.5) == 1.5
assert r.mset({"a": "1", "b": "2"}) and r.mget("a", "b", "c") == [b"1", b"2", None]
assert r.append("a", "23") == 3
assert r.delete("a", "b", "nope") == 2
assert r.exists("k", "n") == 2

# A pipeline: one round trip, replies in order.
p = r.pipeline(transaction=False)
for i in range(1000):
    p.set(f"p{i}", i)
p.get("p999")
res = p.execute()
assert res[:1000] == [True] * 1000 and res[1000] == b"999", res[-3:]

# A transaction: MULTI/EXEC, atomic.
t = r.pipeline(transaction=True)
t.incr("n").set("t", "x").get("n")
assert t.execute() == [11, True, b"11"]

# SCAN iteration sees every key once.
keys = set(r.scan_iter(match="p*", count=50))
assert len(keys) == 1000, len(keys)
assert len(r.keys("p99*")) == 11

# RESP3.
r3 = redis.Redis(port=port, protocol=3)
assert r3.get("k") == b"v" and r3.get("missing") is None
assert r3.execute_command("HELLO", 3)[b"proto"] == 3
assert r3.ping()

try:
    r.execute_command("NOSUCH")
    sys.exit("an unknown command did not fail")
except redis.ResponseError as e:
    assert "unknown command" in str(e)
print("ok")
