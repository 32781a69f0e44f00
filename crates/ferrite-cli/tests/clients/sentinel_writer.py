"""A Sentinel-aware writer: redis-py's `Sentinel` finds the master of
`ferrite` through the sentinels named on the command line, and the
writer sets `w:N` to `vN` for N = 0, 1, ... each followed by `WAIT 1
200`, until it is killed.

After each acknowledged SET it prints one line, flushed:
`PORT WAITED KEY VALUE`, where PORT is the node that took the write and
WAITED is how many replicas `WAIT` counted (-1 when `WAIT` itself
failed). A failed SET prints nothing: it was not acknowledged. After a
failure the client asks the sentinels again, as redis-py does on its own
when a connection to the old master breaks.
"""

import sys
import time

from redis.exceptions import RedisError
from redis.sentinel import Sentinel


def main():
    sentinels = [("127.0.0.1", int(p)) for p in sys.argv[1:]]
    sentinel = Sentinel(sentinels, socket_timeout=1.0)
    master = sentinel.master_for("ferrite", socket_timeout=1.0)
    i = 0
    while True:
        key, value = f"w:{i}", f"v{i}"
        try:
            master.set(key, value)
        except RedisError:
            time.sleep(0.05)
            continue
        # The address the pool's connection was made to: the pool asks
        # the sentinels again for each new connection, and one
        # writer thread uses one connection at a time.
        port = master.connection_pool.master_address[1]
        try:
            waited = master.execute_command("WAIT", 1, 200)
        except RedisError:
            waited = -1
        print(port, waited, key, value, flush=True)
        i += 1


if __name__ == "__main__":
    main()
