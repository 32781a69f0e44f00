//! Oracles the engines' tests share (cargo feature `testkit`): what a
//! store may answer once bytes on its device have gone bad.
//!
//! The rule every check enforces: an answer is the model's, or an error
//! that says the store met bad bytes ([`Error::is_corruption`]). Never a
//! wrong value, never another kind of error, never a panic in the store.
//! The checks panic with `what` and the key on a broken rule, since tests
//! are their only users; they hold no state.

use std::collections::BTreeMap;

use rand::Rng;

use crate::error::{Error, Result};
use crate::range::KeyRange;
use crate::store::{KvStore, KvStoreExt};

/// What a store should hold: key to value.
pub type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A write that failed; it may or may not have taken effect.
pub type Failed = (Vec<u8>, Vec<u8>);

/// Key `i` of the key space the checks use (`key00042`).
pub fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

/// Keys `0..n`.
pub fn keys(n: u32) -> Vec<Vec<u8>> {
    (0..n).map(key).collect()
}

/// A write to a random key of `0..n`: a delete 15% of the time, else a
/// value of up to 120 bytes filled with `fill`, or with `long` 2% of the
/// time one of 9000 bytes (past a page, so overflow chains and value logs
/// see writes too).
pub fn random_write(
    rng: &mut impl Rng,
    n: u32,
    long: bool,
    fill: u8,
) -> (Vec<u8>, Option<Vec<u8>>) {
    let k = key(rng.gen_range(0..n));
    if rng.gen_bool(0.15) {
        return (k, None);
    }
    let len = if long && rng.gen_bool(0.02) {
        9000
    } else {
        rng.gen_range(0..120)
    };
    (k, Some(vec![fill; len]))
}

/// `count` puts of 1 to 99 bytes to random keys of `0..n`.
pub fn random_puts(rng: &mut impl Rng, n: u32, count: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    (0..count)
        .map(|i| {
            (
                key(rng.gen_range(0..n)),
                vec![(i % 13) as u8; rng.gen_range(1..100)],
            )
        })
        .collect()
}

/// Applies a write to `db` (it must succeed) and to `model`.
pub fn apply(db: &dyn KvStore, model: &mut Model, (k, v): (Vec<u8>, Option<Vec<u8>>)) {
    match v {
        Some(v) => {
            db.put(&k, &v).expect("a write before any damage");
            model.insert(k, v);
        }
        None => {
            db.delete(&k).expect("a delete before any damage");
            model.remove(&k);
        }
    }
}

/// Panics unless `e` reports bad bytes.
pub fn assert_corruption(e: &Error, what: &str) {
    assert!(e.is_corruption(), "{what}: {e}");
}

/// One lookup per key of `keys`, against `model`: the model's answer or
/// corruption. The key of a `failed` write may also answer with its
/// value. Returns how many lookups reported corruption.
pub fn check_lookups(
    db: &dyn KvStore,
    keys: &[Vec<u8>],
    model: &Model,
    failed: Option<&Failed>,
    what: &str,
) -> usize {
    let mut damaged = 0;
    for k in keys {
        match db.get(k) {
            Ok(got) => {
                let maybe = failed.filter(|(fk, _)| fk == k).map(|(_, v)| v);
                assert!(
                    got.as_ref() == model.get(k) || (maybe.is_some() && got.as_ref() == maybe),
                    "{what}: key {:?}: {got:?} against {:?}",
                    String::from_utf8_lossy(k),
                    model.get(k)
                );
            }
            Err(e) => {
                assert_corruption(&e, what);
                damaged += 1;
            }
        }
    }
    damaged
}

/// Everything a store opened over damage is asked: a lookup of every key
/// of `keys`, a full scan and `verify` (which must fail if a lookup met
/// corruption); then `writes`, each going through or failing with
/// corruption (the first failure ends them), a flush, and the lookups
/// again against the model with the writes. Returns `verify`'s result.
pub fn exercise(
    db: &dyn KvStore,
    keys: &[Vec<u8>],
    model: &Model,
    writes: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>,
    what: &str,
) -> Result<()> {
    let damaged = check_lookups(db, keys, model, None, what);
    match db.scan_collect(KeyRange::all(), usize::MAX) {
        Ok(got) => assert!(
            got.into_iter().collect::<Model>() == *model,
            "{what}: the scan differs from the model"
        ),
        Err(e) => assert_corruption(&e, what),
    }
    let verified = db.verify();
    if let Err(e) = &verified {
        assert_corruption(e, what);
    }
    assert!(
        damaged == 0 || verified.is_err(),
        "{what}: verify passed after {damaged} lookups met corruption"
    );
    let mut after = model.clone();
    let mut failed = None;
    for (k, v) in writes {
        match db.put(&k, &v) {
            Ok(()) => {
                after.insert(k, v);
            }
            Err(e) => {
                assert_corruption(&e, what);
                failed = Some((k, v));
                break;
            }
        }
    }
    if let Err(e) = db.flush() {
        assert_corruption(&e, what);
    }
    check_lookups(db, keys, &after, failed.as_ref(), what);
    verified
}
