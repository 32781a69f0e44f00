"""ferrite from Python against py-lmdb, rocksdict and plyvel: the same
records, the same cache budget, one process, side by side.

    python bench.py --records 1000000 --out ../docs/results/python

Each store is loaded with `records` random 16-byte keys and 100-byte
values in batches of 1000, then measured: `ops` random gets and `ops`
random puts (one at a time), in cache and with a cache of a tenth of the
data (`cache10_ops` operations there, 50,000 by default: every ferrite get
is then a device read), with one thread and with two (gets); and the same
gets in batches of 100 keys per call (ferrite's `get_many`, py-lmdb's
`Cursor.getmulti`, rocksdict's MultiGet; plyvel has no batched read, so
its rows loop over `get`), one thread and two. ferrite
reads with O_DIRECT, so its cache is the budget; LMDB maps the file and
RocksDB and LevelDB read through the OS page cache, which no option of
theirs bounds, so at a tenth of the cache their reads still come from
memory. Durability: every store writes
without syncing each write (ferrite `sync=never`, LMDB `sync=False`,
RocksDB's and LevelDB's WAL unsynced). A store whose package is missing
is skipped and says so. The Python layer's cost per get is the Python
call against the same engine's Rust `get` on the same keys, timed inside
the extension (`Store._timed_gets`, one call for all of them). Results go
to OUT/repro.json.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

# The source tree beside this script holds `ferrite/` without its compiled
# module: import the installed package instead.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
import ferrite  # noqa: E402


def keyset(n, seed):
    rng = random.Random(seed)
    return [rng.getrandbits(128).to_bytes(16, "big") for _ in range(n)]


class Ferrite:
    name = "ferrite"

    def __init__(self, path, cache_bytes, engine):
        self.name = f"ferrite-{engine}"
        self.db = ferrite.open(path, engine=engine, cache_mb=max(1, cache_bytes >> 20), sync="never")

    def load(self, pairs):
        for i in range(0, len(pairs), 1000):
            with self.db.batch() as b:
                for k, v in pairs[i : i + 1000]:
                    b.put(k, v)
        self.db.flush()

    def get(self, k):
        return self.db.get(k)

    def get_many(self, ks):
        return self.db.get_many(ks)

    def rust_gets(self, keys):
        return self.db._timed_gets(keys)

    def put(self, k, v):
        self.db.put(k, v)

    def close(self):
        self.db.close()


class Lmdb:
    name = "py-lmdb"

    def __init__(self, path, cache_bytes):
        import lmdb

        self.env = lmdb.open(path, map_size=64 << 30, sync=False, metasync=False, readahead=False)

    def load(self, pairs):
        for i in range(0, len(pairs), 1000):
            with self.env.begin(write=True) as t:
                for k, v in pairs[i : i + 1000]:
                    t.put(k, v)

    def get(self, k):
        with self.env.begin(buffers=False) as t:
            return t.get(k)

    def get_many(self, ks):
        # py-lmdb's batched read: one transaction and one cursor call.
        with self.env.begin(buffers=False) as t:
            return [v for _, v in t.cursor().getmulti(ks)]

    def put(self, k, v):
        with self.env.begin(write=True) as t:
            t.put(k, v)

    def close(self):
        self.env.close()


class RocksDict:
    name = "rocksdict"

    def __init__(self, path, cache_bytes):
        from rocksdict import BlockBasedOptions, Cache, Options, Rdict, WriteOptions

        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        t = BlockBasedOptions()
        t.set_block_cache(Cache(cache_bytes))
        t.set_cache_index_and_filter_blocks(True)
        t.set_bloom_filter(10, False)
        opts.set_block_based_table_factory(t)
        self.db = Rdict(path, opts)
        w = WriteOptions()
        w.sync = False
        self.db.set_write_options(w)

    def load(self, pairs):
        from rocksdict import WriteBatch

        for i in range(0, len(pairs), 1000):
            b = WriteBatch(raw_mode=True)
            for k, v in pairs[i : i + 1000]:
                b.put(k, v)
            self.db.write(b)
        self.db.flush()

    def get(self, k):
        return self.db.get(k)

    def get_many(self, ks):
        # A list of keys is RocksDB's MultiGet.
        return self.db.get(ks)

    def put(self, k, v):
        self.db[k] = v

    def close(self):
        self.db.close()


class Plyvel:
    name = "plyvel"

    def __init__(self, path, cache_bytes):
        import plyvel

        self.db = plyvel.DB(path, create_if_missing=True, lru_cache_size=cache_bytes, bloom_filter_bits=10)

    def load(self, pairs):
        for i in range(0, len(pairs), 1000):
            with self.db.write_batch() as b:
                for k, v in pairs[i : i + 1000]:
                    b.put(k, v)

    def get(self, k):
        return self.db.get(k)

    def get_many(self, ks):
        # plyvel has no batched read.
        return [self.db.get(k) for k in ks]

    def put(self, k, v):
        self.db.put(k, v)

    def close(self):
        self.db.close()


# Keys per batched get.
BATCH = 100


def timed(fn, n):
    t = time.perf_counter()
    fn()
    return n / (time.perf_counter() - t)


def in_two_threads(call, items):
    """Calls `call` on every item, the first half from one thread and the
    second from another, and returns when both are done."""
    halves = [items[: len(items) // 2], items[len(items) // 2 :]]
    ts = [threading.Thread(target=lambda h=h: [call(x) for x in h]) for h in halves]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def measure(store, keys, value, ops, seed):
    rng = random.Random(seed)
    probe = [keys[rng.randrange(len(keys))] for _ in range(ops)]
    for k in probe[: ops // 10]:
        store.get(k)
    out = {}
    out["get"] = timed(lambda: [store.get(k) for k in probe], ops)
    out["get_2threads"] = timed(lambda: in_two_threads(store.get, probe), ops)
    # Batched gets, BATCH keys per call, one thread and then two.
    batches = [probe[i : i + BATCH] for i in range(0, ops, BATCH)]
    for b in batches[: len(batches) // 10]:
        store.get_many(b)
    for b in batches[:3]:
        assert len(store.get_many(b)) == len(b)
    out["get_many"] = timed(lambda: [store.get_many(b) for b in batches], ops)
    out["get_many_2threads"] = timed(lambda: in_two_threads(store.get_many, batches), ops)
    if hasattr(store, "rust_gets"):
        found, ns = store.rust_gets(probe)
        assert found == len(probe)
        out["rust_get"] = ops / (ns / 1e9)
    out["put"] = timed(lambda: [store.put(k, value) for k in probe], ops)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--ops", type=int, default=1_000_000)
    # At a tenth of the cache every ferrite get is a device read (O_DIRECT),
    # so that pass runs fewer operations.
    ap.add_argument("--cache10-ops", type=int, default=50_000)
    ap.add_argument("--engines", default="btree,lsm")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    keys = keyset(a.records, 1)
    value = bytes(100)
    pairs = [(k, value) for k in keys]
    data = a.records * (16 + 100)
    results, notes = {}, []
    work = a.dir or tempfile.mkdtemp(prefix="ferrite-pybench-")
    for cache_name, cache in [("incache", data * 4), ("cache10", data // 10)]:
        makers = [(f"ferrite-{e}", lambda p, c, e=e: Ferrite(p, c, e)) for e in a.engines.split(",")]
        makers += [("py-lmdb", Lmdb), ("rocksdict", RocksDict), ("plyvel", Plyvel)]
        for name, make in makers:
            path = os.path.join(work, f"{name}-{cache_name}")
            shutil.rmtree(path, ignore_errors=True)
            os.makedirs(path, exist_ok=True)
            try:
                store = make(path, cache)
            except ImportError as e:
                notes.append(f"{name} skipped: {e}")
                continue
            t = time.perf_counter()
            store.load(pairs)
            load = a.records / (time.perf_counter() - t)
            r = measure(store, keys, value, a.ops if cache_name == "incache" else a.cache10_ops, 2)
            r["load"] = load
            store.close()
            shutil.rmtree(path, ignore_errors=True)
            results[f"{name}/{cache_name}"] = r
            print(name, cache_name, {k: round(v) for k, v in r.items()}, flush=True)
    def ratio(a_, b_, key, cache="incache"):
        x, y = results.get(f"{a_}/{cache}"), results.get(f"{b_}/{cache}")
        return None if x is None or y is None else x[key] / y[key]
    best = max((k.split("/")[0] for k in results if k.startswith("ferrite") and k.endswith("incache")),
               key=lambda n: results[f"{n}/incache"]["get"], default=None)
    metrics = {
        "get_vs_lmdb_incache": ratio(best, "py-lmdb", "get") if best else None,
        "get_vs_rocksdict_incache": ratio(best, "rocksdict", "get") if best else None,
        "put_vs_rocksdict": ratio(best, "rocksdict", "put") if best else None,
        "two_thread_read_scaling": (results[f"{best}/incache"]["get_2threads"] / results[f"{best}/incache"]["get"]) if best else None,
        "two_thread_read_scaling_get_many": (results[f"{best}/incache"]["get_many_2threads"] / results[f"{best}/incache"]["get_many"]) if best else None,
        "get_many_vs_lmdb_incache": ratio(best, "py-lmdb", "get_many") if best else None,
        "get_many_vs_rocksdict_incache": ratio(best, "rocksdict", "get_many") if best else None,
        "python_overhead_ns_per_get": (1e9 / results[f"{best}/incache"]["get"] - 1e9 / results[f"{best}/incache"]["rust_get"]) if best else None,
    }
    report = {"records": a.records, "ops": a.ops, "cache10_ops": a.cache10_ops, "best_ferrite_engine": best, "results": results, "metrics": metrics, "notes": notes}
    print(json.dumps(metrics, indent=1))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "repro.json"), "w") as f:
            json.dump(report, f, indent=1)
    if not a.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
