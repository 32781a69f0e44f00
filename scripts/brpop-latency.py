#!/usr/bin/env python3
"""BRPOP wake-up latency: CONSUMERS clients blocked in `BRPOP q 0`, one
producer `LPUSH`ing items that carry the time they were sent; each
consumer takes the time its item arrived. Prints P50 and P99 in
microseconds. Plain sockets, no client library: the same Python overhead
for every server measured.

    scripts/brpop-latency.py PORT [ITEMS] [CONSUMERS]
"""
import socket
import sys
import threading
import time


def command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise EOFError
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n + 2:
            self.buf += self.s.recv(65536)
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self.line()
        kind, rest = line[:1], line[1:]
        if kind == b"*":
            return [self.reply() for _ in range(int(rest))] if int(rest) >= 0 else None
        if kind == b"$":
            return self.exact(int(rest)) if int(rest) >= 0 else None
        if kind == b"-":
            raise RuntimeError(rest.decode())
        return rest

    def call(self, *args):
        self.s.sendall(command(*args))
        return self.reply()


def main():
    port = int(sys.argv[1])
    items = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    consumers = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    Conn(port).call("DEL", "brpop-latency")
    latencies = []
    lock = threading.Lock()

    def consume():
        c = Conn(port)
        while True:
            _, item = c.call("BRPOP", "brpop-latency", 0)
            if item == b"stop":
                return
            got = time.perf_counter_ns()
            with lock:
                latencies.append((got - int(item)) / 1000)

    threads = [threading.Thread(target=consume) for _ in range(consumers)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    p = Conn(port)
    for _ in range(items):
        p.call("LPUSH", "brpop-latency", time.perf_counter_ns())
        time.sleep(0.001)
    for _ in range(consumers):
        p.call("LPUSH", "brpop-latency", "stop")
    for t in threads:
        t.join()
    latencies.sort()
    n = len(latencies)
    print(f"items {n} p50_us {latencies[n // 2]:.0f} p99_us {latencies[min(n - 1, n * 99 // 100)]:.0f}")


if __name__ == "__main__":
    main()
