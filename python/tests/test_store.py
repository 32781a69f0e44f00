"""ferrite's Python package: a model-based test against a dict for every
engine (with reopens), iterators both ways, snapshots, batches, errors,
closing, and threads sharing one store (single and batched gets)."""
import concurrent.futures

import pytest
from hypothesis import given, settings, strategies as st

import ferrite

ENGINES = ferrite.engines()


def opened(tmp_path, engine, **kw):
    return ferrite.open(tmp_path / engine, engine=engine, cache_mb=4, sync="never", direct_io=False, **kw)


keys = st.binary(min_size=1, max_size=12)
values = st.binary(max_size=300)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), keys, values),
        st.tuples(st.just("delete"), keys),
        st.tuples(st.just("delete_range"), keys, keys),
        st.tuples(st.just("batch"), st.lists(st.tuples(keys, st.one_of(st.none(), values)), max_size=8)),
        st.tuples(st.just("cas"), keys, st.booleans(), st.one_of(st.none(), values)),
        st.tuples(st.just("reopen")),
    ),
    max_size=60,
)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=25, deadline=None)
@given(ops=ops)
def test_matches_a_dict(tmp_path_factory, engine, ops):
    tmp = tmp_path_factory.mktemp("model")
    db = opened(tmp, engine)
    model = {}
    for op in ops:
        if op[0] == "put":
            db[op[1]] = op[2]
            model[op[1]] = op[2]
        elif op[0] == "delete":
            db.delete(op[1])
            model.pop(op[1], None)
        elif op[0] == "delete_range":
            lo, hi = sorted((op[1], op[2]))
            if lo == hi:
                with pytest.raises(ferrite.InvalidOptions):
                    db.delete_range(lo, hi)
                continue
            db.delete_range(lo, hi)
            for k in [k for k in model if lo <= k < hi]:
                del model[k]
        elif op[0] == "batch":
            with db.batch() as b:
                for k, v in op[1]:
                    if v is None:
                        b.delete(k)
                        model.pop(k, None)
                    else:
                        b.put(k, v)
                        model[k] = v
        elif op[0] == "cas":
            _, k, right, new = op
            expected = model.get(k) if right else b"\xffnot-the-value"
            assert db.compare_and_swap(k, expected, new) is right
            if right:
                if new is None:
                    model.pop(k, None)
                else:
                    model[k] = new
        elif op[0] == "reopen":
            db.close()
            db = opened(tmp, engine)
        assert dict(db.items()) == model
    assert list(db.keys(reverse=True)) == sorted(model, reverse=True)
    for k, v in model.items():
        assert db[k] == v and k in db
    probe = list(model) + [k + b"\x00" for k in model if k + b"\x00" not in model]
    assert db.get_many(probe) == [model.get(k) for k in probe]
    db.close()


@pytest.mark.parametrize("engine", ENGINES)
def test_iterators_snapshots_and_errors(tmp_path, engine):
    with opened(tmp_path, engine) as db:
        for i in range(100):
            db[b"k%03d" % i] = b"v%d" % i
        assert [k for k in db.keys(start=b"k010", stop=b"k013")] == [b"k010", b"k011", b"k012"]
        assert next(db.items(prefix=b"k09", reverse=True)) == (b"k099", b"v99")
        assert list(db.values(prefix=b"k05"))[:2] == [b"v50", b"v51"]
        snap = db.snapshot()
        db.delete_range(b"k000", b"k050")
        db[b"k099"] = b"new"
        assert snap[b"k000"] == b"v0" and snap.get(b"k099") == b"v99"
        assert b"k000" not in db and db.get(b"k000", b"dflt") == b"dflt"
        assert len(list(snap.keys())) == 100 and len(list(db.keys())) == 50
        assert snap.get_many([b"k000", b"k099", b"zz"]) == [b"v0", b"v99", None]
        assert db.get_many([b"k000", b"k099", b"zz"]) == [None, b"new", None]
        with pytest.raises(TypeError):
            db.get_many([b"k000", 7])
        with pytest.raises(ferrite.KeyTooLong):
            db.get_many([b"x" * 5000])
        with pytest.raises(KeyError):
            db[b"nope"]
        with pytest.raises(KeyError):
            del db[b"nope"]
        with pytest.raises(ferrite.KeyTooLong):
            db[b""] = b"x"
        with pytest.raises(ferrite.KeyTooLong):
            db[b"x" * 5000] = b"x"
        with pytest.raises(TypeError):
            db["text"] = b"x"
        with pytest.raises(ZeroDivisionError):
            with db.batch() as b:
                b.put(b"dropped", b"x")
                1 / 0
        assert b"dropped" not in db
        assert db.stats()["puts"] >= 100
        db.verify()
    assert db.closed
    with pytest.raises(ferrite.Closed):
        db.get(b"k001")
    # The snapshot reads what it held, after the store closed.
    assert snap[b"k001"] == b"v1"


def test_str_keys_and_reopen_with_detected_engine(tmp_path):
    with ferrite.open(tmp_path / "s", engine="lsm", str_keys=True, direct_io=False) as db:
        db["name"] = "ada"
        assert db["name"] == b"ada"
    with ferrite.open(tmp_path / "s", direct_io=False) as db:
        assert db.engine == "lsm" and db[b"name"] == b"ada"
    with pytest.raises(ferrite.NotAStore):
        ferrite.open(tmp_path / "none", create=False)


def test_threads_share_a_store(tmp_path):
    with opened(tmp_path, "btree") as db:
        for i in range(2000):
            db[b"%05d" % i] = b"x" * 50

        def work(t):
            for i in range(2000):
                assert db[b"%05d" % i] == b"x" * 50
                if i % 10 == t:
                    db.compare_and_swap(b"ctr%d" % t, db.get(b"ctr%d" % t), b"%d" % i)

            want = [b"x" * 50] * 100
            for i in range(0, 2000, 100):
                assert db.get_many([b"%05d" % j for j in range(i, i + 100)]) == want

        # result() raises what a thread raised, so a failed assertion in
        # any thread fails the test (pytest only warns about one in a
        # bare threading.Thread).
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            for f in [pool.submit(work, t) for t in range(4)]:
                f.result()
        assert all(db.get(b"ctr%d" % t) is not None for t in range(4))


@pytest.mark.parametrize("engine", ["btree", "lsm", "zkv"])
def test_transactions(tmp_path, engine):
    db = opened(tmp_path, engine)
    db[b"a"] = b"1"
    db[b"b"] = b"2"
    # Reads see the transaction's own writes; commit on a clean exit.
    with db.transaction() as tx:
        assert tx[b"a"] == b"1"
        tx[b"a"] = b"10"
        tx.delete(b"b")
        assert tx.get(b"a") == b"10" and b"b" not in tx
        assert tx.items() == [(b"a", b"10")]
        assert db[b"a"] == b"1"
    assert db[b"a"] == b"10" and b"b" not in db
    # An exception drops every write.
    with pytest.raises(RuntimeError):
        with db.transaction() as tx:
            tx[b"c"] = b"3"
            raise RuntimeError("abandon")
    assert b"c" not in db
    # A lost update is refused, writing nothing.
    t1, t2 = db.transaction(), db.transaction()
    for t in (t1, t2):
        t[b"a"] = str(int(t[b"a"]) + 1).encode()
    t1[b"x"] = b"t1"
    t2.commit()
    with pytest.raises(ferrite.Conflict):
        t1.commit()
    assert db[b"a"] == b"11" and b"x" not in db
    # A phantom in a scanned range is refused too.
    t = db.transaction()
    assert [k for k, _ in t.items(prefix=b"o")] == []
    t[b"count"] = b"0"
    db[b"order:1"] = b"x"
    with pytest.raises(ferrite.Conflict):
        t.commit()
    db.close()
    # A transaction does not keep its store open.
    t = ferrite.open(tmp_path / engine, engine=engine, direct_io=False)
    tx = t.transaction()
    tx[b"late"] = b"1"
    t.close()
    with pytest.raises(ferrite.Closed):
        tx.commit()


@pytest.mark.parametrize("engine", ["btree", "lsm", "zkv"])
def test_transact_from_threads_loses_no_increment(tmp_path, engine):
    db = opened(tmp_path, engine)

    def increment(tx):
        n = int(tx.get(b"n", b"0"))
        tx[b"n"] = str(n + 1).encode()
        return n

    def work(_):
        return [db.transact(increment) for _ in range(100)]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        seen = [n for ns in pool.map(work, range(4)) for n in ns]
    # Each increment read a distinct count: serial, whatever the retries.
    assert sorted(seen) == list(range(400))
    assert db[b"n"] == b"400"
    db.close()


@pytest.mark.parametrize("engine", ["btree", "lsm", "zkv"])
def test_checkpoint_is_an_openable_copy(tmp_path, engine):
    db = opened(tmp_path, engine)
    for i in range(500):
        db[b"k%04d" % i] = b"v" * (i % 50)
    stats = db.checkpoint(tmp_path / "copy")
    assert stats["disk_bytes"] > 0
    if engine == "lsm":
        # The LSM copies its files (here only its memtable, as a table).
        assert stats["pairs"] is None and stats["user_bytes"] is None
    else:
        assert stats["pairs"] == 500 and stats["shared_bytes"] == 0
    db[b"after"] = b"not in the copy"
    with pytest.raises(ferrite.Error):
        db.checkpoint(tmp_path / "copy")
    db.close()
    with ferrite.open(tmp_path / "copy", direct_io=False) as copy:
        assert copy.engine == engine
        assert b"after" not in copy
        assert dict(copy.items()) == {b"k%04d" % i: b"v" * (i % 50) for i in range(500)}
        copy.verify()


def test_lsm_compression_is_chosen_at_open(tmp_path):
    """An lsm store takes its table compression at open ("none", "lz4",
    "zstd" or "zstd:LEVEL"); tables written with one open read back under
    another. Other engines and unknown codecs are refused."""
    text = b"Package: libexample\nDescription: an example library\n" * 20
    for i, codec in enumerate(["zstd:5", "none", "lz4"]):
        with ferrite.open(tmp_path / "db", engine="lsm", cache_mb=4, sync="never",
                          direct_io=False, compression=codec) as db:
            for k in range(300):
                db.put(b"%d-%05d" % (i, k), text + bytes([k % 251]))
            db.flush()
            for j in range(i + 1):
                assert db.get(b"%d-%05d" % (j, 7)) == text + bytes([7])
    with pytest.raises(ValueError):
        ferrite.open(tmp_path / "bt", engine="btree", compression="lz4")
    with pytest.raises(ValueError):
        ferrite.open(tmp_path / "db", engine="lsm", compression="snappy")


@pytest.mark.parametrize("engine", ["btree", "lsm", "zkv"])
def test_keyspaces(tmp_path, engine):
    db = opened(tmp_path, engine)
    db[b"k"] = b"default"
    users = db.keyspace("users")
    emails = db.keyspace("emails")
    users[b"k"] = b"ada"
    assert users.name == "users" and db.name is None
    assert isinstance(db, ferrite.Keyspace)
    assert db[b"k"] == b"default" and users[b"k"] == b"ada"
    assert b"k" not in emails
    assert db.keyspaces() == ["emails", "users"]
    # One batch across keyspaces, all or nothing.
    with db.batch() as b:
        b.put(b"u2", b"grace", keyspace=users)
        b.put(b"grace@x", b"u2", keyspace=emails)
        b.put(b"count", b"2")
    assert list(users.keys()) == [b"k", b"u2"]
    assert list(emails.items()) == [(b"grace@x", b"u2")]
    assert list(db.keys()) == [b"count", b"k"]
    # A transaction across keyspaces.
    with db.transaction() as tx:
        v = tx.get(b"u2", keyspace=users)
        tx.delete(b"u2", keyspace=users)
        tx.put(b"moved", v, keyspace=emails)
        assert tx.items(keyspace=emails) == [(b"grace@x", b"u2"), (b"moved", b"grace")]
    assert b"u2" not in users and emails[b"moved"] == b"grace"
    # A drop is final for the handle and conflicts with an open transaction.
    tx = db.transaction()
    tx.put(b"x", b"1", keyspace=emails)
    assert db.drop_keyspace("emails")
    assert not db.drop_keyspace("emails")
    with pytest.raises(ferrite.Conflict):
        tx.commit()
    with pytest.raises(ferrite.KeyspaceDropped):
        emails.get(b"grace@x")
    assert db.keyspace("emails").get(b"grace@x") is None
    with pytest.raises(ValueError):
        db[b"\xff\xff\x01"] = b"reserved once keyspaces exist"
    db.close()
    db = ferrite.open(tmp_path / engine, sync="never", direct_io=False)
    assert db.keyspaces() == ["emails", "users"]
    assert db.keyspace("users")[b"k"] == b"ada"
    db.close()
    with pytest.raises(ferrite.Closed):
        users.get(b"k")
