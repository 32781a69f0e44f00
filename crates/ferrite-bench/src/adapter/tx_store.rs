//! The `KvStore` face shared by transactional baselines (LMDB, redb):
//! each write is one transaction of batch operations, so a backend only
//! supplies get, apply, scan and sync, and this type adds validation,
//! counting and the order check.

use ferrite::{
    check_key, check_value, ApiCounters, BatchOp, KeyRange, KvStore, Result, ScanVisitor, Stats,
    WriteBatch,
};

/// A store whose writes are transactions of batch operations.
pub(crate) trait TxBackend: Send + Sync {
    const NAME: &'static str;
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Applies `ops` in one transaction.
    fn apply(&self, ops: &[BatchOp]) -> Result<()>;
    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()>;
    fn sync(&self) -> Result<()>;
}

pub(crate) struct TxStore<B> {
    backend: B,
    ops: ApiCounters,
}

impl<B: TxBackend> TxStore<B> {
    pub fn new(backend: B) -> Self {
        Self {
            backend,
            ops: ApiCounters::default(),
        }
    }
}

impl<B: TxBackend> KvStore for TxStore<B> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        check_key(key)?;
        let v = self.backend.get(key)?;
        self.ops.count_get(key, v.as_deref());
        Ok(v)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        check_key(key)?;
        check_value(value)?;
        self.ops.count_puts(1);
        self.ops.add_written((key.len() + value.len()) as u64);
        self.backend.apply(&[BatchOp::Put {
            key: key.to_vec(),
            value: value.to_vec(),
        }])
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        check_key(key)?;
        self.ops.count_delete();
        self.ops.add_written(key.len() as u64);
        self.backend.apply(&[BatchOp::Delete { key: key.to_vec() }])
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.ops.count_scan();
        let mut read = 0;
        self.backend.scan(range, &mut |k, v| {
            read += (k.len() + v.len()) as u64;
            visit(k, v)
        })?;
        self.ops.add_read(read);
        Ok(())
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.ops.count_batch();
        self.ops.add_written(batch.payload_bytes() as u64);
        self.backend.apply(batch.ops())
    }

    fn flush(&self) -> Result<()> {
        self.backend.sync()
    }

    fn sync(&self) -> Result<()> {
        self.backend.sync()
    }

    fn stats(&self) -> Stats {
        Stats {
            ops: self.ops.ops(),
            user_bytes_written: self.ops.bytes_written(),
            user_bytes_read: self.ops.bytes_read(),
            ..Stats::default()
        }
    }

    fn verify(&self) -> Result<()> {
        super::verify_by_scan(self, B::NAME)
    }
}
