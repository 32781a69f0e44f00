//! `Counted`: a peer store with the call and user-byte counts ferrite's
//! engines keep themselves.
//!
//! The peers (RocksDB, LMDB, redb, fjall, `BTreeMap`) count nothing the
//! harness can read, so each is opened inside this wrapper, which counts
//! exactly what an engine counts ([`ApiCounters`]) and reports it in the
//! store's own [`Stats`]. The wrapper is generic, so the peer's calls stay
//! static, as the engines' own counting is.

use ferrite::internals::{ApiCounters, Instrumented};
use ferrite::{
    KeyRange, KvStore, Result, ScanVisitor, Stats, StoreSnapshot, WriteBatch, WriteCheck,
};

pub struct Counted<S> {
    inner: S,
    api: ApiCounters,
}

impl<S: KvStore> Counted<S> {
    fn scan_counted(
        &self,
        range: KeyRange<'_>,
        rev: bool,
        visit: &mut ScanVisitor<'_>,
    ) -> Result<()> {
        let mut read = 0;
        let mut counting = |k: &[u8], v: &[u8]| {
            read += (k.len() + v.len()) as u64;
            visit(k, v)
        };
        let done = if rev {
            self.inner.scan_rev(range, &mut counting)
        } else {
            self.inner.scan(range, &mut counting)
        };
        self.api.count_scan();
        self.api.add_read(read);
        done
    }

    pub fn new(inner: S) -> Self {
        Self {
            inner,
            api: ApiCounters::default(),
        }
    }
}

impl<S: KvStore + 'static> KvStore for Counted<S> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let v = self.inner.get(key)?;
        self.api.count_get(key, v.as_deref());
        Ok(v)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.inner.put(key, value)?;
        self.api.count_puts(1);
        self.api.add_written((key.len() + value.len()) as u64);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.inner.delete(key)?;
        self.api.count_delete();
        self.api.add_written(key.len() as u64);
        Ok(())
    }

    fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<()> {
        self.inner.delete_range(start, end)?;
        self.api.count_delete();
        self.api.add_written((start.len() + end.len()) as u64);
        Ok(())
    }

    /// Counted as a put when it writes.
    fn compare_and_swap(
        &self,
        key: &[u8],
        expected: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> Result<bool> {
        let swapped = self.inner.compare_and_swap(key, expected, new)?;
        if swapped {
            self.api.count_puts(1);
            self.api
                .add_written((key.len() + new.map_or(0, <[u8]>::len)) as u64);
        }
        Ok(swapped)
    }

    fn scan(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.scan_counted(range, false, visit)
    }

    fn scan_rev(&self, range: KeyRange<'_>, visit: &mut ScanVisitor<'_>) -> Result<()> {
        self.scan_counted(range, true, visit)
    }

    fn snapshot(&self) -> Result<Box<dyn StoreSnapshot>> {
        self.inner.snapshot()
    }

    fn close(self: Box<Self>) -> Result<()> {
        Box::new(self.inner).close()
    }

    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.inner.write_batch(batch)?;
        self.api.count_batch();
        self.api.add_written(batch.payload_bytes() as u64);
        Ok(())
    }

    fn write_batch_if(&self, batch: &WriteBatch, check: &mut WriteCheck<'_>) -> Result<bool> {
        let done = self.inner.write_batch_if(batch, check)?;
        if done {
            self.api.count_batch();
            self.api.add_written(batch.payload_bytes() as u64);
        }
        Ok(done)
    }

    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    fn sync(&self) -> Result<()> {
        self.inner.sync()
    }

    fn stats(&self) -> Stats {
        Stats {
            ops: self.api.ops(),
            user_bytes_written: self.api.bytes_written(),
            user_bytes_read: self.api.bytes_read(),
            ..self.inner.stats()
        }
    }

    /// Counted as puts: the inner store's own batches bypass the wrapper.
    fn bulk_load(&self, sorted: &mut dyn Iterator<Item = (Vec<u8>, Vec<u8>)>) -> Result<u64> {
        let mut bytes = 0u64;
        let n = self.inner.bulk_load(&mut sorted.inspect(|(k, v)| {
            bytes += (k.len() + v.len()) as u64;
        }))?;
        self.api.count_puts(n);
        self.api.add_written(bytes);
        Ok(n)
    }

    fn verify(&self) -> Result<()> {
        self.inner.verify()
    }
}

impl<S: Instrumented + 'static> Instrumented for Counted<S> {
    fn settle(&self) -> Result<()> {
        self.inner.settle()
    }
}
