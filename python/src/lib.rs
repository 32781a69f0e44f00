//! `ferrite._ferrite`: the Python extension over the `ferrite` facade.
//!
//! Invariants:
//! - every call that can wait on the device or a lock runs with the GIL
//!   released (`Python::detach`), so threads reading one store scale;
//! - no Rust panic crosses into Python: PyO3 turns one into an exception,
//!   and engine errors become the `ferrite.Error` subclass of their kind;
//! - a closed store refuses calls with `ferrite.Closed`; iterators and
//!   snapshots read the snapshot they hold, which stays valid (it holds
//!   the engine state it reads) after the store is closed.

use std::ops::Bound as Edge;
use std::sync::Arc;

use ferrite::{
    Config, DetachedKeyspace, EngineKind, Iter, KeyspaceBatch, KvPair, Snapshot, Store, SyncMode,
    Transaction, WriteBatch,
};
use parking_lot::Mutex;
use pyo3::exceptions::{PyException, PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use pyo3::PyClassInitializer;

pyo3::create_exception!(
    _ferrite,
    Error,
    PyException,
    "Any error of a ferrite store."
);
pyo3::create_exception!(
    _ferrite,
    KeyTooLong,
    Error,
    "A key over the engine's limit, or empty."
);
pyo3::create_exception!(
    _ferrite,
    ValueTooLarge,
    Error,
    "A value over the engine's limit."
);
pyo3::create_exception!(
    _ferrite,
    Corruption,
    Error,
    "Bytes read back failed a checksum or structure check."
);
pyo3::create_exception!(
    _ferrite,
    StoreFull,
    Error,
    "The device is full; nothing acknowledged was lost."
);
pyo3::create_exception!(
    _ferrite,
    Poisoned,
    Error,
    "An earlier write or sync failed; reopen the store."
);
pyo3::create_exception!(_ferrite, NotAStore, Error, "The directory holds no store.");
pyo3::create_exception!(_ferrite, InvalidOptions, Error, "Options that cannot work.");
pyo3::create_exception!(
    _ferrite,
    SnapshotTooOld,
    Error,
    "The snapshot kept more old versions than allowed."
);
pyo3::create_exception!(_ferrite, Closed, Error, "The store was closed.");
pyo3::create_exception!(
    _ferrite,
    Conflict,
    Error,
    "A transaction read what another writer changed before it committed; nothing of it was written."
);
pyo3::create_exception!(_ferrite, IoError, Error, "The device failed.");
pyo3::create_exception!(
    _ferrite,
    KeyspaceDropped,
    Error,
    "The keyspace was dropped."
);

/// The exception for an engine error: the class of its kind, its message.
fn to_py(e: ferrite::Error) -> PyErr {
    use ferrite::Error as E;
    let msg = e.to_string();
    if e.is_no_space() {
        return StoreFull::new_err(msg);
    }
    match e {
        E::EmptyKey | E::KeyTooLarge { .. } => KeyTooLong::new_err(msg),
        E::ValueTooLarge { .. } => ValueTooLarge::new_err(msg),
        E::Corruption { .. } => Corruption::new_err(msg),
        E::Poisoned { .. } => Poisoned::new_err(msg),
        E::NotAStore { .. } => NotAStore::new_err(msg),
        E::InvalidOptions(_) | E::EmptyRange | E::NotKeyValue(_) | E::EngineUnavailable(_) => {
            InvalidOptions::new_err(msg)
        }
        E::SnapshotTooOld { .. } => SnapshotTooOld::new_err(msg),
        E::Conflict(_) => Conflict::new_err(msg),
        E::Closed => Closed::new_err(msg),
        E::KeyspaceDropped(_) => KeyspaceDropped::new_err(msg),
        E::ReservedKey { .. } | E::InvalidKeyspaceName { .. } => PyValueError::new_err(msg),
        E::Device(_) => IoError::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// A looked-up value as `bytes`, or `default` where the key is absent.
fn or_default(py: Python<'_>, v: Option<Vec<u8>>, default: Option<Py<PyAny>>) -> Option<Py<PyAny>> {
    match v {
        Some(v) => Some(PyBytes::new(py, &v).into_any().unbind()),
        None => default,
    }
}

/// A looked-up value as `bytes`, or `KeyError(key)` where it is absent.
fn or_key_error(py: Python<'_>, v: Option<Vec<u8>>, key: &[u8]) -> PyResult<Py<PyBytes>> {
    match v {
        Some(v) => Ok(PyBytes::new(py, &v).unbind()),
        None => Err(PyKeyError::new_err(PyBytes::new(py, key).unbind())),
    }
}

/// Every key an iterable yields, each taken as [`bytes_of`] takes it.
fn keys_of(keys: &Bound<'_, PyAny>, allow_str: bool) -> PyResult<Vec<Vec<u8>>> {
    keys.try_iter()?.map(|k| bytes_of(&k?, allow_str)).collect()
}

/// Looked-up values as Python objects: `bytes`, or `None` where absent.
fn values_of(py: Python<'_>, values: Vec<Option<Vec<u8>>>) -> Vec<Option<Py<PyBytes>>> {
    values
        .into_iter()
        .map(|v| v.map(|v| PyBytes::new(py, &v).unbind()))
        .collect()
}

/// Keys and values: `bytes`, `bytearray`, `memoryview`; `str` as UTF-8
/// when the store was opened with `str_keys=True`.
fn bytes_of(obj: &Bound<'_, PyAny>, allow_str: bool) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    if let Ok(b) = obj.cast::<pyo3::types::PyByteArray>() {
        return Ok(b.to_vec());
    }
    if obj.is_instance_of::<pyo3::types::PyMemoryView>() {
        // The buffer protocol is outside the stable ABI before 3.11.
        let b = obj.call_method0("tobytes")?;
        return Ok(b.cast::<PyBytes>()?.as_bytes().to_vec());
    }
    if allow_str {
        if let Ok(s) = obj.cast::<pyo3::types::PyString>() {
            return Ok(s.to_cow()?.as_bytes().to_vec());
        }
    }
    Err(PyTypeError::new_err(format!(
        "keys and values are bytes{}; got {}",
        if allow_str {
            " or str"
        } else {
            " (open with str_keys=True to pass str)"
        },
        obj.get_type().name()?
    )))
}

fn range_of(
    start: Option<Vec<u8>>,
    stop: Option<Vec<u8>>,
    prefix: Option<Vec<u8>>,
) -> (Edge<Vec<u8>>, Edge<Vec<u8>>) {
    if let Some(p) = prefix {
        let r = ferrite::OwnedKeyRange::prefix(&p);
        return (r.start, r.end);
    }
    (
        start.map_or(Edge::Unbounded, Edge::Included),
        stop.map_or(Edge::Unbounded, Edge::Excluded),
    )
}

/// What an iterator yields.
#[derive(Clone, Copy)]
enum Yield {
    Items,
    Keys,
    Values,
}

/// A lazy iterator over a snapshot (`Store.items`, `keys`, `values`).
#[pyclass(module = "ferrite._ferrite")]
pub struct Iterator {
    iter: Mutex<Iter>,
    what: Yield,
    reverse: bool,
}

#[pymethods]
impl Iterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let reverse = self.reverse;
        let next: Option<ferrite::Result<KvPair>> = py.detach(|| {
            let mut it = self.iter.lock();
            if reverse {
                it.next_back()
            } else {
                it.next()
            }
        });
        let Some(pair) = next else {
            return Ok(None);
        };
        let (k, v) = pair.map_err(to_py)?;
        Ok(Some(match self.what {
            Yield::Items => (PyBytes::new(py, &k), PyBytes::new(py, &v))
                .into_pyobject(py)?
                .into_any()
                .unbind(),
            Yield::Keys => PyBytes::new(py, &k).into_any().unbind(),
            Yield::Values => PyBytes::new(py, &v).into_any().unbind(),
        }))
    }
}

/// A read view at one instant (`Store.snapshot()`).
#[pyclass(module = "ferrite._ferrite", name = "Snapshot")]
pub struct PySnapshot {
    snap: Snapshot,
    str_keys: bool,
}

fn make_iter(
    snap: &Snapshot,
    what: Yield,
    start: Option<Vec<u8>>,
    stop: Option<Vec<u8>>,
    prefix: Option<Vec<u8>>,
    reverse: bool,
) -> Iterator {
    Iterator {
        iter: Mutex::new(snap.range(range_of(start, stop, prefix))),
        what,
        reverse,
    }
}

impl PySnapshot {
    /// The iterator `items`, `keys` and `values` return.
    fn iter_of(
        &self,
        what: Yield,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Iterator> {
        let b = |o: Option<&Bound<'_, PyAny>>| o.map(|o| bytes_of(o, self.str_keys)).transpose();
        Ok(make_iter(
            &self.snap,
            what,
            b(start)?,
            b(stop)?,
            b(prefix)?,
            reverse,
        ))
    }
}

#[pymethods]
impl PySnapshot {
    #[pyo3(signature = (key, default = None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let k = bytes_of(key, self.str_keys)?;
        Ok(or_default(
            py,
            py.detach(|| self.snap.get(&k)).map_err(to_py)?,
            default,
        ))
    }

    /// The values of `keys` as of the snapshot, in order, `None` where a
    /// key is absent; one release of the GIL for all the lookups.
    fn get_many(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<Py<PyBytes>>>> {
        let ks = keys_of(keys, self.str_keys)?;
        let values = py
            .detach(|| {
                ks.iter()
                    .map(|k| self.snap.get(k))
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(to_py)?;
        Ok(values_of(py, values))
    }

    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyBytes>> {
        let k = bytes_of(key, self.str_keys)?;
        or_key_error(py, py.detach(|| self.snap.get(&k)).map_err(to_py)?, &k)
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = bytes_of(key, self.str_keys)?;
        py.detach(|| self.snap.contains_key(&k)).map_err(to_py)
    }

    #[pyo3(signature = (start = None, stop = None, reverse = false, prefix = None))]
    fn items(
        &self,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Iterator> {
        self.iter_of(Yield::Items, start, stop, reverse, prefix)
    }

    #[pyo3(signature = (start = None, stop = None, reverse = false, prefix = None))]
    fn keys(
        &self,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Iterator> {
        self.iter_of(Yield::Keys, start, stop, reverse, prefix)
    }

    #[pyo3(signature = (start = None, stop = None, reverse = false, prefix = None))]
    fn values(
        &self,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Iterator> {
        self.iter_of(Yield::Values, start, stop, reverse, prefix)
    }

    fn __iter__(&self) -> Iterator {
        make_iter(&self.snap, Yield::Keys, None, None, None, false)
    }
}

/// Writes gathered and applied at once (`Store.batch()`); as a context
/// manager it commits on a clean exit and drops everything on an
/// exception.
#[pyclass(module = "ferrite._ferrite")]
pub struct Batch {
    store: Arc<Mutex<Option<Arc<Store>>>>,
    batch: Mutex<WriteBatch>,
    str_keys: bool,
}

impl Batch {
    /// Adds to the batch, in `keyspace` when given (a keyspace of this
    /// batch's store).
    fn add(
        &self,
        keyspace: Option<PyRef<'_, PyKeyspace>>,
        op: impl FnOnce(&mut WriteBatch, Option<&ferrite::Keyspace<'_>>) -> ferrite::Result<()>,
    ) -> PyResult<()> {
        let mut b = self.batch.lock();
        match keyspace.as_ref().and_then(|k| k.ks.as_ref()) {
            None => op(&mut b, None).map_err(to_py),
            Some(ks) => {
                let store = open_store(&self.store)?;
                let ks = store.attach(ks).map_err(to_py)?;
                op(&mut b, Some(&ks)).map_err(to_py)
            }
        }
    }
}

#[pymethods]
impl Batch {
    #[pyo3(signature = (key, value, *, keyspace = None))]
    fn put(
        &self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        keyspace: Option<PyRef<'_, PyKeyspace>>,
    ) -> PyResult<()> {
        let (k, v) = (
            bytes_of(key, self.str_keys)?,
            bytes_of(value, self.str_keys)?,
        );
        self.add(keyspace, |b, ks| match ks {
            Some(ks) => b.put_in(ks, &k, &v).map(drop),
            None => b.put(&k, &v).map(drop),
        })
    }

    #[pyo3(signature = (key, *, keyspace = None))]
    fn delete(
        &self,
        key: &Bound<'_, PyAny>,
        keyspace: Option<PyRef<'_, PyKeyspace>>,
    ) -> PyResult<()> {
        let k = bytes_of(key, self.str_keys)?;
        self.add(keyspace, |b, ks| match ks {
            Some(ks) => b.delete_in(ks, &k).map(drop),
            None => b.delete(&k).map(drop),
        })
    }

    #[pyo3(signature = (start, stop, *, keyspace = None))]
    fn delete_range(
        &self,
        start: &Bound<'_, PyAny>,
        stop: &Bound<'_, PyAny>,
        keyspace: Option<PyRef<'_, PyKeyspace>>,
    ) -> PyResult<()> {
        let (s, e) = (
            bytes_of(start, self.str_keys)?,
            bytes_of(stop, self.str_keys)?,
        );
        self.add(keyspace, |b, ks| match ks {
            Some(ks) => b.delete_range_in(ks, &s, &e).map(drop),
            None => b.delete_range(&s, &e).map(drop),
        })
    }

    fn __len__(&self) -> usize {
        self.batch.lock().len()
    }

    /// Applies the gathered writes atomically and empties the batch.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let store = open_store(&self.store)?;
        let b = std::mem::take(&mut *self.batch.lock());
        py.detach(|| store.write(&b)).map_err(to_py)
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _v: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_none() {
            self.commit(py)?;
        } else {
            self.batch.lock().clear();
        }
        Ok(false)
    }
}

/// A read-write transaction (`Store.transaction()`): reads see its own
/// writes over a snapshot taken when it began; `commit` applies its
/// writes atomically, or raises `Conflict` if something it read changed
/// meanwhile. As a context manager it commits on a clean exit and drops
/// everything on an exception. It does not keep the store open.
#[pyclass(module = "ferrite._ferrite", name = "Transaction")]
pub struct PyTransaction {
    tx: Mutex<Option<Transaction<'static>>>,
    /// The store, to find the keyspaces the transaction is given.
    store: Arc<Mutex<Option<Arc<Store>>>>,
    str_keys: bool,
}

/// What a transaction's operation runs on: the default key space or a
/// keyspace.
enum TxSpace<'a, 't> {
    Default(&'a mut Transaction<'t>),
    In(ferrite::TxKeyspace<'a, 't>),
}

impl TxSpace<'_, '_> {
    fn get(&mut self, k: &[u8]) -> ferrite::Result<Option<Vec<u8>>> {
        match self {
            TxSpace::Default(t) => t.get(k),
            TxSpace::In(t) => t.get(k),
        }
    }

    fn put(&mut self, k: &[u8], v: &[u8]) -> ferrite::Result<()> {
        match self {
            TxSpace::Default(t) => t.put(k, v),
            TxSpace::In(t) => t.put(k, v),
        }
    }

    fn delete(&mut self, k: &[u8]) -> ferrite::Result<()> {
        match self {
            TxSpace::Default(t) => t.delete(k),
            TxSpace::In(t) => t.delete(k),
        }
    }

    fn delete_range(&mut self, s: Vec<u8>, e: Vec<u8>) -> ferrite::Result<()> {
        match self {
            TxSpace::Default(t) => t.delete_range(s..e),
            TxSpace::In(t) => t.delete_range(s..e),
        }
    }

    fn scan(
        &mut self,
        range: ferrite::KeyRange<'_>,
        reverse: bool,
        visit: &mut ferrite::ScanVisitor<'_>,
    ) -> ferrite::Result<()> {
        match (self, reverse) {
            (TxSpace::Default(t), false) => t.scan(range, visit),
            (TxSpace::Default(t), true) => t.scan_rev(range, visit),
            (TxSpace::In(t), false) => t.scan(range, visit),
            (TxSpace::In(t), true) => t.scan_rev(range, visit),
        }
    }
}

impl PyTransaction {
    /// Runs `f` on the open transaction.
    fn with<R>(
        &self,
        f: impl FnOnce(&mut Transaction<'static>) -> ferrite::Result<R>,
    ) -> PyResult<R> {
        let mut tx = self.tx.lock();
        let tx = tx
            .as_mut()
            .ok_or_else(|| Error::new_err("the transaction has ended"))?;
        f(tx).map_err(to_py)
    }

    /// Runs `f` on the open transaction, in `keyspace` when given.
    fn with_in<R>(
        &self,
        keyspace: Option<&DetachedKeyspace>,
        f: impl FnOnce(&mut TxSpace<'_, 'static>) -> ferrite::Result<R>,
    ) -> PyResult<R> {
        let Some(detached) = keyspace else {
            return self.with(|t| f(&mut TxSpace::Default(t)));
        };
        let store = open_store(&self.store)?;
        self.with(|t| {
            let ks = store.attach(detached)?;
            let space = t.keyspace(&ks)?;
            f(&mut TxSpace::In(space))
        })
    }
}

#[pymethods]
impl PyTransaction {
    #[pyo3(signature = (key, default = None, *, keyspace = None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
        keyspace: Option<PyRef<'_, PyKeyspace>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let k = bytes_of(key, self.str_keys)?;
        let ks = keyspace.and_then(|k| k.ks.clone());
        Ok(or_default(
            py,
            py.detach(|| self.with_in(ks.as_ref(), |t| t.get(&k)))?,
            default,
        ))
    }

    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyBytes>> {
        let k = bytes_of(key, self.str_keys)?;
        or_key_error(py, py.detach(|| self.with(|t| t.get(&k)))?, &k)
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = bytes_of(key, self.str_keys)?;
        Ok(py.detach(|| self.with(|t| t.get(&k)))?.is_some())
    }

    #[pyo3(signature = (key, value, *, keyspace = None))]
    fn put(
        &self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        keyspace: Option<PyRef<'_, PyKeyspace>>,
    ) -> PyResult<()> {
        let (k, v) = (
            bytes_of(key, self.str_keys)?,
            bytes_of(value, self.str_keys)?,
        );
        let ks = keyspace.and_then(|k| k.ks.clone());
        self.with_in(ks.as_ref(), |t| t.put(&k, &v))
    }

    fn __setitem__(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.put(key, value, None)
    }

    #[pyo3(signature = (key, *, keyspace = None))]
    fn delete(
        &self,
        key: &Bound<'_, PyAny>,
        keyspace: Option<PyRef<'_, PyKeyspace>>,
    ) -> PyResult<()> {
        let k = bytes_of(key, self.str_keys)?;
        let ks = keyspace.and_then(|k| k.ks.clone());
        self.with_in(ks.as_ref(), |t| t.delete(&k))
    }

    #[pyo3(signature = (start, stop, *, keyspace = None))]
    fn delete_range(
        &self,
        start: &Bound<'_, PyAny>,
        stop: &Bound<'_, PyAny>,
        keyspace: Option<PyRef<'_, PyKeyspace>>,
    ) -> PyResult<()> {
        let (s, e) = (
            bytes_of(start, self.str_keys)?,
            bytes_of(stop, self.str_keys)?,
        );
        let ks = keyspace.and_then(|k| k.ks.clone());
        self.with_in(ks.as_ref(), |t| t.delete_range(s, e))
    }

    /// The `(key, value)` pairs of `start <= key < stop` (or under
    /// `prefix`), ascending or with `reverse` descending, at most `limit`;
    /// the range counts as read as far as the list goes.
    #[pyo3(signature = (start = None, stop = None, reverse = false, prefix = None, limit = None, *, keyspace = None))]
    #[allow(
        clippy::too_many_arguments,
        reason = "one per keyword argument of the Python method"
    )]
    fn items(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        prefix: Option<&Bound<'_, PyAny>>,
        limit: Option<usize>,
        keyspace: Option<PyRef<'_, PyKeyspace>>,
    ) -> PyResult<Vec<(Py<PyBytes>, Py<PyBytes>)>> {
        let b = |o: Option<&Bound<'_, PyAny>>| o.map(|o| bytes_of(o, self.str_keys)).transpose();
        let (lo, hi) = range_of(b(start)?, b(stop)?, b(prefix)?);
        let range = ferrite::OwnedKeyRange { start: lo, end: hi };
        let limit = limit.unwrap_or(usize::MAX);
        let ks = keyspace.and_then(|k| k.ks.clone());
        let pairs = py.detach(|| {
            self.with_in(ks.as_ref(), |t| {
                let mut out = Vec::new();
                if limit == 0 {
                    return Ok(out);
                }
                t.scan(range.as_range(), reverse, &mut |k: &[u8], v: &[u8]| {
                    out.push((k.to_vec(), v.to_vec()));
                    if out.len() >= limit {
                        std::ops::ControlFlow::Break(())
                    } else {
                        std::ops::ControlFlow::Continue(())
                    }
                })?;
                Ok(out)
            })
        })?;
        Ok(pairs
            .into_iter()
            .map(|(k, v)| (PyBytes::new(py, &k).unbind(), PyBytes::new(py, &v).unbind()))
            .collect())
    }

    /// Applies the writes atomically if nothing read has changed; raises
    /// `Conflict` (writing nothing) otherwise. Ends the transaction.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let tx = self
            .tx
            .lock()
            .take()
            .ok_or_else(|| Error::new_err("the transaction has ended"))?;
        py.detach(|| tx.commit()).map_err(to_py)
    }

    /// Drops the writes and ends the transaction.
    fn rollback(&self) {
        self.tx.lock().take();
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _v: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_none() && self.tx.lock().is_some() {
            self.commit(py)?;
        } else {
            self.rollback();
        }
        Ok(false)
    }
}

/// A key space of a store: a named keyspace (`Store.keyspace(name)`),
/// its own ordered key space sharing the store's log, cache and memory
/// budget, which batches and transactions take as `keyspace=`; and the
/// base of `Store`, whose dict-like methods are its default key space's.
#[pyclass(module = "ferrite._ferrite", name = "Keyspace", subclass)]
pub struct PyKeyspace {
    store: Arc<Mutex<Option<Arc<Store>>>>,
    /// `None`: the store's default key space.
    ks: Option<DetachedKeyspace>,
    str_keys: bool,
}

/// The key space a call works in, borrowed from the open store.
enum Space<'s> {
    Default(&'s Store),
    Named(ferrite::Keyspace<'s>),
}

impl Space<'_> {
    fn get(&self, k: &[u8]) -> ferrite::Result<Option<Vec<u8>>> {
        match self {
            Space::Default(s) => s.get(k),
            Space::Named(ks) => ks.get(k),
        }
    }

    fn get_many(&self, keys: &[Vec<u8>]) -> ferrite::Result<Vec<Option<Vec<u8>>>> {
        match self {
            Space::Default(s) => s.get_many(keys),
            Space::Named(ks) => ks.get_many(keys),
        }
    }

    fn put(&self, k: &[u8], v: &[u8]) -> ferrite::Result<()> {
        match self {
            Space::Default(s) => s.put(k, v),
            Space::Named(ks) => ks.put(k, v),
        }
    }

    fn delete(&self, k: &[u8]) -> ferrite::Result<()> {
        match self {
            Space::Default(s) => s.delete(k),
            Space::Named(ks) => ks.delete(k),
        }
    }

    fn delete_range(&self, a: Vec<u8>, b: Vec<u8>) -> ferrite::Result<()> {
        match self {
            Space::Default(s) => s.delete_range(a..b),
            Space::Named(ks) => ks.delete_range(a..b),
        }
    }

    fn compare_and_swap(
        &self,
        k: &[u8],
        e: Option<&[u8]>,
        n: Option<&[u8]>,
    ) -> ferrite::Result<bool> {
        match self {
            Space::Default(s) => s.compare_and_swap(k, e, n),
            Space::Named(ks) => ks.compare_and_swap(k, e, n),
        }
    }

    fn snapshot(&self) -> ferrite::Result<Snapshot> {
        match self {
            Space::Default(s) => s.snapshot(),
            Space::Named(ks) => ks.snapshot(),
        }
    }
}

impl PyKeyspace {
    fn key(&self, o: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
        bytes_of(o, self.str_keys)
    }

    /// Runs `f` on the key space, with the GIL released.
    fn run<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Space<'_>) -> ferrite::Result<R> + Send,
    ) -> PyResult<R> {
        let store = open_store(&self.store)?;
        py.detach(|| match &self.ks {
            None => f(&Space::Default(&store)),
            Some(ks) => f(&Space::Named(store.attach(ks)?)),
        })
        .map_err(to_py)
    }
}

#[pymethods]
impl PyKeyspace {
    /// The keyspace's name; `None` for a store's default key space.
    #[getter]
    fn name(&self) -> Option<&str> {
        self.ks.as_ref().map(|k| k.name())
    }

    #[pyo3(signature = (key, default = None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<Py<PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let k = self.key(key)?;
        Ok(or_default(py, self.run(py, |ks| ks.get(&k))?, default))
    }

    fn get_many(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<Option<Py<PyBytes>>>> {
        let ks = keys_of(keys, self.str_keys)?;
        let values = self.run(py, |s| s.get_many(&ks))?;
        Ok(values_of(py, values))
    }

    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyBytes>> {
        let k = self.key(key)?;
        or_key_error(py, self.run(py, |ks| ks.get(&k))?, &k)
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.put(py, key, value)
    }

    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = self.key(key)?;
        // A dict raises KeyError for a missing key; so does this, atomically.
        loop {
            let Some(old) = self.run(py, |ks| ks.get(&k))? else {
                return Err(PyKeyError::new_err(PyBytes::new(py, &k).unbind()));
            };
            if self.run(py, |ks| ks.compare_and_swap(&k, Some(&old), None))? {
                return Ok(());
            }
        }
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = self.key(key)?;
        self.run(py, |ks| ks.get(&k).map(|v| v.is_some()))
    }

    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (k, v) = (self.key(key)?, bytes_of(value, self.str_keys)?);
        self.run(py, |ks| ks.put(&k, &v))
    }

    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let k = self.key(key)?;
        self.run(py, |ks| ks.delete(&k))
    }

    /// Removes every key `k` of the keyspace with `start <= k < stop`.
    fn delete_range(
        &self,
        py: Python<'_>,
        start: &Bound<'_, PyAny>,
        stop: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let (a, b) = (self.key(start)?, self.key(stop)?);
        self.run(py, |ks| ks.delete_range(a, b))
    }

    /// Sets `key` to `new` (None deletes) if it now holds `expected`.
    fn compare_and_swap(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        expected: Option<&Bound<'_, PyAny>>,
        new: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let k = self.key(key)?;
        let e = expected.map(|o| bytes_of(o, self.str_keys)).transpose()?;
        let n = new.map(|o| bytes_of(o, self.str_keys)).transpose()?;
        self.run(py, |ks| ks.compare_and_swap(&k, e.as_deref(), n.as_deref()))
    }

    /// A read view of the keyspace as it is now.
    fn snapshot(&self, py: Python<'_>) -> PyResult<PySnapshot> {
        let snap = self.run(py, |ks| ks.snapshot())?;
        Ok(PySnapshot {
            snap,
            str_keys: self.str_keys,
        })
    }

    #[pyo3(signature = (start = None, stop = None, reverse = false, prefix = None))]
    fn items(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Iterator> {
        self.snapshot(py)?.items(start, stop, reverse, prefix)
    }

    #[pyo3(signature = (start = None, stop = None, reverse = false, prefix = None))]
    fn keys(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Iterator> {
        self.snapshot(py)?.keys(start, stop, reverse, prefix)
    }

    #[pyo3(signature = (start = None, stop = None, reverse = false, prefix = None))]
    fn values(
        &self,
        py: Python<'_>,
        start: Option<&Bound<'_, PyAny>>,
        stop: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        prefix: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Iterator> {
        self.snapshot(py)?.values(start, stop, reverse, prefix)
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<Iterator> {
        self.keys(py, None, None, false, None)
    }

    fn __repr__(&self) -> String {
        format!(
            "<ferrite.Keyspace {:?}>",
            self.name().unwrap_or("(default)")
        )
    }
}

fn open_store(slot: &Mutex<Option<Arc<Store>>>) -> PyResult<Arc<Store>> {
    slot.lock()
        .clone()
        .ok_or_else(|| Closed::new_err("the store is closed"))
}

/// An open store of any engine; see `ferrite.open`.
#[pyclass(module = "ferrite._ferrite", name = "Store", extends = PyKeyspace)]
pub struct PyStore {
    store: Arc<Mutex<Option<Arc<Store>>>>,
    engine: EngineKind,
    str_keys: bool,
}

impl PyStore {
    fn live(&self) -> PyResult<Arc<Store>> {
        open_store(&self.store)
    }
}

#[pymethods]
impl PyStore {
    #[getter]
    fn engine(&self) -> &'static str {
        self.engine.name()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.store.lock().is_none()
    }

    /// Looks up every key of `keys` from Rust, in one call, and returns
    /// how many were found and the nanoseconds the lookups took: what a
    /// `get` costs without Python, for `bench.py`'s overhead figure.
    fn _timed_gets(&self, py: Python<'_>, keys: Vec<Vec<u8>>) -> PyResult<(usize, u64)> {
        let s = self.live()?;
        py.detach(|| {
            let t = std::time::Instant::now();
            let mut found = 0;
            for k in &keys {
                found += usize::from(s.get(k)?.is_some());
            }
            Ok((found, t.elapsed().as_nanos() as u64))
        })
        .map_err(to_py)
    }

    fn batch(&self) -> Batch {
        Batch {
            store: self.store.clone(),
            batch: Mutex::new(WriteBatch::new()),
            str_keys: self.str_keys,
        }
    }

    /// Writes a consistent copy of the store as of now into `path` (which
    /// must not exist) while reads and writes go on; returns what it
    /// copied (`pairs` and `user_bytes`, `None` when the engine copied its
    /// files; `shared_bytes` and `copied_bytes` of those files;
    /// `disk_bytes`, `seconds`).
    fn checkpoint<'py>(
        &self,
        py: Python<'py>,
        path: std::path::PathBuf,
    ) -> PyResult<Bound<'py, PyDict>> {
        let s = self.live()?;
        let st = py.detach(|| s.checkpoint(&path)).map_err(to_py)?;
        let d = PyDict::new(py);
        d.set_item("pairs", st.pairs)?;
        d.set_item("user_bytes", st.user_bytes)?;
        d.set_item("shared_bytes", st.shared_bytes)?;
        d.set_item("copied_bytes", st.copied_bytes)?;
        d.set_item("disk_bytes", st.disk_bytes)?;
        d.set_item("seconds", st.elapsed.as_secs_f64())?;
        Ok(d)
    }

    /// The keyspace `name`, created if the store has none of that name.
    fn keyspace(&self, py: Python<'_>, name: &str) -> PyResult<PyKeyspace> {
        let s = self.live()?;
        let ks = py
            .detach(|| s.keyspace(name).map(|k| k.detach()))
            .map_err(to_py)?;
        Ok(PyKeyspace {
            store: self.store.clone(),
            ks: Some(ks),
            str_keys: self.str_keys,
        })
    }

    /// The names of the store's keyspaces, ascending.
    fn keyspaces(&self) -> PyResult<Vec<String>> {
        Ok(self.live()?.keyspaces())
    }

    /// Drops keyspace `name` and everything in it; returns whether there
    /// was one. Quick whatever it holds: its keys are removed in the
    /// background.
    fn drop_keyspace(&self, py: Python<'_>, name: &str) -> PyResult<bool> {
        let s = self.live()?;
        py.detach(|| s.drop_keyspace(name)).map_err(to_py)
    }

    /// A read-write transaction over a snapshot taken now.
    fn transaction(&self, py: Python<'_>) -> PyResult<PyTransaction> {
        let s = self.live()?;
        let tx = py.detach(|| s.transaction_shared()).map_err(to_py)?;
        Ok(PyTransaction {
            tx: Mutex::new(Some(tx)),
            store: self.store.clone(),
            str_keys: self.str_keys,
        })
    }

    /// Calls `body(tx)` in a transaction and commits it, calling it again
    /// on a fresh snapshot while the commit raises `Conflict` (up to
    /// `attempts` in all, backing off from 10 µs doubling to 10 ms);
    /// returns what `body` returned. An exception from `body` drops the
    /// transaction and propagates.
    #[pyo3(signature = (body, attempts = 64))]
    fn transact(
        &self,
        py: Python<'_>,
        body: &Bound<'_, PyAny>,
        attempts: u32,
    ) -> PyResult<Py<PyAny>> {
        let mut wait = std::time::Duration::from_micros(10);
        let mut attempt = 1;
        loop {
            let tx = Bound::new(py, self.transaction(py)?)?;
            let out = body.call1((tx.clone(),))?;
            match tx.borrow().commit(py) {
                Ok(()) => return Ok(out.unbind()),
                Err(e) if e.is_instance_of::<Conflict>(py) && attempt < attempts.max(1) => {
                    attempt += 1;
                    py.detach(|| std::thread::sleep(wait));
                    wait = (wait * 2).min(std::time::Duration::from_millis(10));
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.live()?;
        py.detach(|| s.flush()).map_err(to_py)
    }

    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.live()?;
        py.detach(|| s.sync()).map_err(to_py)
    }

    /// Every counter, common and the engine's own, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.live()?;
        let st = py.detach(|| s.stats());
        let d = PyDict::new(py);
        for (k, v) in st.fields() {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.live()?;
        py.detach(|| s.verify()).map_err(to_py)
    }

    /// Stops background work, writes what is in memory, syncs; raises if
    /// any of that failed. Closing twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let Some(mut arc) = self.store.lock().take() else {
            return Ok(());
        };
        // Calls in flight on other threads hold a reference for a moment.
        let store = loop {
            match Arc::try_unwrap(arc) {
                Ok(s) => break s,
                Err(again) => {
                    arc = again;
                    py.detach(|| std::thread::sleep(std::time::Duration::from_millis(1)));
                }
            }
        };
        py.detach(|| store.close()).map_err(to_py)
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Option<&Bound<'_, PyAny>>,
        _v: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "<ferrite.Store engine={}{}>",
            self.engine,
            if self.closed() { " closed" } else { "" }
        )
    }
}

/// Opens (or creates) the store in `path`. An existing store opens with
/// the engine that made it unless `engine` names another (an error).
/// `compression` ("none", "lz4", "zstd" or "zstd:LEVEL") sets how an lsm
/// store compresses the tables it writes from now on (lz4 if not given).
#[pyfunction]
#[allow(
    clippy::too_many_arguments,
    reason = "one per keyword argument of the Python function"
)]
#[pyo3(signature = (path, engine = None, *, cache_mb = 64, sync = "batched:10", create = true, direct_io = true, str_keys = false, compression = None))]
fn open(
    py: Python<'_>,
    path: std::path::PathBuf,
    engine: Option<&str>,
    cache_mb: u64,
    sync: &str,
    create: bool,
    direct_io: bool,
    str_keys: bool,
    compression: Option<&str>,
) -> PyResult<Py<PyStore>> {
    let kind = match engine {
        Some(e) => e
            .parse::<EngineKind>()
            .map_err(|e| PyValueError::new_err(e.to_string()))?,
        None => match ferrite::detect(&path) {
            Ok(id) => id.engine,
            Err(_) if create => EngineKind::Btree,
            Err(e) => return Err(to_py(e)),
        },
    };
    let sync = SyncMode::parse(sync).map_err(to_py)?;
    let mut builder = Config::builder(kind)
        .cache_bytes(cache_mb << 20)
        .sync(sync)
        .create_if_missing(create)
        .direct_io(direct_io);
    if let Some(c) = compression {
        // Table block compression is the LSM's: the B+trees keep pages
        // addressable in place.
        if kind != EngineKind::Lsm {
            return Err(PyValueError::new_err(format!(
                "compression applies to the lsm engine's tables, not to {kind}"
            )));
        }
        let c = c
            .parse::<ferrite::lsm::Compression>()
            .map_err(PyValueError::new_err)?;
        builder = builder.lsm(ferrite::lsm::LsmOptions::default().compression(c));
    }
    let store = py.detach(|| builder.open(&path)).map_err(to_py)?;
    let slot = Arc::new(Mutex::new(Some(Arc::new(store))));
    let space = PyKeyspace {
        store: slot.clone(),
        ks: None,
        str_keys,
    };
    let store = PyStore {
        store: slot,
        engine: kind,
        str_keys,
    };
    Py::new(py, PyClassInitializer::from(space).add_subclass(store))
}

/// The engines this build contains.
#[pyfunction]
fn engines() -> Vec<&'static str> {
    ferrite::available().into_iter().map(|k| k.name()).collect()
}

#[pymodule]
fn _ferrite(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(engines, m)?)?;
    m.add_class::<PyStore>()?;
    m.add_class::<PySnapshot>()?;
    m.add_class::<Batch>()?;
    m.add_class::<PyTransaction>()?;
    m.add_class::<Iterator>()?;
    m.add_class::<PyKeyspace>()?;
    for (name, ty) in [
        ("Error", py.get_type::<Error>()),
        ("KeyTooLong", py.get_type::<KeyTooLong>()),
        ("ValueTooLarge", py.get_type::<ValueTooLarge>()),
        ("Corruption", py.get_type::<Corruption>()),
        ("StoreFull", py.get_type::<StoreFull>()),
        ("Poisoned", py.get_type::<Poisoned>()),
        ("NotAStore", py.get_type::<NotAStore>()),
        ("InvalidOptions", py.get_type::<InvalidOptions>()),
        ("SnapshotTooOld", py.get_type::<SnapshotTooOld>()),
        ("Closed", py.get_type::<Closed>()),
        ("Conflict", py.get_type::<Conflict>()),
        ("IoError", py.get_type::<IoError>()),
        ("KeyspaceDropped", py.get_type::<KeyspaceDropped>()),
    ] {
        m.add(name, ty)?;
    }
    Ok(())
}
