"""ferrite: SSD-native key-value stores behind one dict-like API.

    import ferrite

    with ferrite.open("db", engine="lsm", cache_mb=256, sync="always") as db:
        db[b"user:1"] = b"ada"
        with db.batch() as b:            # atomic, committed on exit
            b.put(b"user:2", b"grace")
            b.delete(b"user:0")
        for key, value in db.items(prefix=b"user:", reverse=True):
            print(key, value)
        with db.transaction() as tx:     # serializable, committed on exit
            tx[b"user:3"] = tx[b"user:1"] + b"!"
        users = db.keyspace("users")     # a named key space, same log
        with db.batch() as b:            # atomic across keyspaces
            b.put(b"1", b"ada", keyspace=users)
            b.put(b"user:1", b"ada")
        snap = db.snapshot()             # a frozen view
        db.delete_range(b"user:", b"user;")
        assert snap[b"user:1"] == b"ada"

Engines: "btree" (reads, data that fits the cache), "turboindex" (random
writes into data far larger than the cache), "shortcut" (point reads on
deep trees), "lsm" (write-heavy loads), "zkv" (small pairs on zoned
storage). Every error is a ``ferrite.Error`` subclass.
"""

from ._ferrite import (
    Batch,
    Closed,
    Conflict,
    Corruption,
    Error,
    InvalidOptions,
    IoError,
    Iterator,
    Keyspace,
    KeyspaceDropped,
    KeyTooLong,
    NotAStore,
    Poisoned,
    Snapshot,
    SnapshotTooOld,
    Store,
    StoreFull,
    Transaction,
    ValueTooLarge,
    engines,
    open,
)

__all__ = [
    "open",
    "engines",
    "Store",
    "Snapshot",
    "Batch",
    "Transaction",
    "Keyspace",
    "Iterator",
    "Error",
    "KeyTooLong",
    "ValueTooLarge",
    "Corruption",
    "StoreFull",
    "Poisoned",
    "NotAStore",
    "InvalidOptions",
    "SnapshotTooOld",
    "Closed",
    "IoError",
    "KeyspaceDropped",
]
