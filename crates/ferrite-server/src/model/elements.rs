//! The element records of collections: hash fields, set members, and
//! sorted-set members with their score index (list items are `list`'s).
//! Each operation names the collection by its slot and header; keeping
//! the header's `size` right is the caller's part.
//!
//! Invariant: a sorted-set member has exactly one field record (its
//! score) and one score-index record (score, member).

use std::collections::VecDeque;
use std::ops::{Bound, ControlFlow};

use super::hints::Mark;
use super::layout::{self, MAX_MEMBER};
use super::meta::Coll;
use super::pop_queue::{PopQueue, READ_AHEAD};
use super::tx::Tx;
use super::{ModelError, Pairs, Visit};

/// Collections up to this size are sampled exactly (read whole).
pub const EXACT_SAMPLE: u64 = 4096;

/// Sets up to this size are popped by an exact draw (read whole). Above
/// it a pop reads only what it takes: a pop reading every member costs
/// a set of a few thousand a few thousand reads per pop. Redis's own
/// small-set encoding ends at the same size (`set-max-listpack-entries`).
pub const EXACT_POP: u64 = 128;

/// A member bound as a bound on stored member bytes: members longer than
/// [`MAX_MEMBER`] cannot be stored, so a longer bound is cut to the
/// longest stored member it admits (see the tests).
fn member_bound(b: Bound<&[u8]>, upper: bool) -> Bound<&[u8]> {
    match b {
        Bound::Included(m) | Bound::Excluded(m) if m.len() > MAX_MEMBER => {
            let cut = &m[..MAX_MEMBER];
            if upper {
                Bound::Included(cut)
            } else {
                Bound::Excluded(cut)
            }
        }
        other => other,
    }
}

/// The stored-key range of members between `lo` and `hi` of a
/// member-ordered collection.
fn member_span(slot: u8, c: &Coll, lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> (Vec<u8>, Vec<u8>) {
    let (all_start, all_end) = layout::fields(slot, c.version);
    let key = |m: &[u8]| layout::field_at(slot, c.version, m);
    let start = match member_bound(lo, false) {
        Bound::Included(m) => key(m),
        Bound::Excluded(m) => {
            let mut k = key(m);
            k.push(0);
            k
        }
        Bound::Unbounded => all_start,
    };
    let end = match member_bound(hi, true) {
        Bound::Included(m) => {
            let mut k = key(m);
            k.push(0);
            k
        }
        Bound::Excluded(m) => key(m),
        Bound::Unbounded => all_end,
    };
    (start, end)
}

/// What a scan of positions calls for each member: its position, the
/// member, its value.
pub type PositionVisit<'a> = dyn FnMut(&[u8], &[u8], &[u8]) -> ControlFlow<()> + 'a;

fn score_of(v: &[u8]) -> Result<f64, ModelError> {
    let b: [u8; 8] = v
        .try_into()
        .map_err(|_| ModelError::Corrupt("a sorted-set score is not 8 bytes".into()))?;
    Ok(super::score::decode(b))
}

/// `n` of `all` drawn uniformly: distinct ones (all of them if fewer),
/// or with `repeat`, `n` draws that may repeat.
pub(super) fn draw(mut all: Pairs, n: u64, repeat: bool, rng: &mut impl rand::Rng) -> Pairs {
    if all.is_empty() {
        return all;
    }
    if repeat {
        return (0..n)
            .map(|_| all[rng.gen_range(0..all.len())].clone())
            .collect();
    }
    let take = (n as usize).min(all.len());
    // A partial Fisher-Yates shuffle: the first `take` are the draw.
    for i in 0..take {
        let j = rng.gen_range(i..all.len());
        all.swap(i, j);
    }
    all.truncate(take);
    all
}

impl Tx<'_> {
    /// A hash field's value or a set member's (empty) record.
    pub fn field(&self, slot: u8, c: &Coll, member: &[u8]) -> Result<Option<Vec<u8>>, ModelError> {
        if member.len() > MAX_MEMBER {
            return Ok(None);
        }
        self.get(&layout::field(slot, c.version, c.kind, member)?)
    }

    pub fn put_field(
        &mut self,
        slot: u8,
        c: &Coll,
        member: &[u8],
        value: Vec<u8>,
    ) -> Result<(), ModelError> {
        let k = layout::field(slot, c.version, c.kind, member)?;
        self.put(k, value)
    }

    pub fn delete_field(&mut self, slot: u8, c: &Coll, member: &[u8]) -> Result<(), ModelError> {
        let k = layout::field(slot, c.version, c.kind, member)?;
        self.delete(k)
    }

    /// Visits the members (with their values) of a member-ordered
    /// collection (a sorted set) between `lo` and `hi`, in member order
    /// or reversed.
    pub fn scan_members(
        &self,
        slot: u8,
        c: &Coll,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        rev: bool,
        visit: &mut Visit<'_>,
    ) -> Result<(), ModelError> {
        debug_assert!(
            !layout::hashed(c.kind),
            "hashed members have no member order"
        );
        let (start, end) = member_span(slot, c, lo, hi);
        if start >= end {
            return Ok(());
        }
        self.scan(&start, Some(&end), rev, &mut |k, v| {
            visit(&k[layout::FIELD_AT..], v)
        })
    }

    /// Visits every member of a collection in stored order (member order
    /// for a sorted set, hash order for a hash or set) from `from`, a
    /// position (included), until `visit` breaks.
    pub fn scan_positions(
        &self,
        slot: u8,
        c: &Coll,
        from: Option<&[u8]>,
        visit: &mut PositionVisit<'_>,
    ) -> Result<(), ModelError> {
        let (all_start, end) = layout::fields(slot, c.version);
        let start = from.map_or(all_start, |p| layout::field_at(slot, c.version, p));
        let mut bad = false;
        self.scan(&start, Some(&end), false, &mut |k, v| {
            let pos = &k[layout::FIELD_AT..];
            match layout::member_at(c.kind, pos) {
                Some(m) => visit(pos, m, v),
                None => {
                    bad = true;
                    ControlFlow::Break(())
                }
            }
        })?;
        if bad {
            return Err(ModelError::Corrupt("a member record is malformed".into()));
        }
        Ok(())
    }

    /// Every member and value, in stored order.
    pub fn all_fields(&self, slot: u8, c: &Coll) -> Result<Pairs, ModelError> {
        let mut out = Vec::with_capacity(c.size.min(1 << 20) as usize);
        self.scan_positions(slot, c, None, &mut |_, m, v| {
            out.push((m.to_vec(), v.to_vec()));
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// Members (with values) drawn at random: `n` distinct ones (all of
    /// them if fewer), or with `repeat`, `n` draws that may repeat. A
    /// collection of up to [`EXACT_SAMPLE`] elements is read whole and
    /// drawn from uniformly; a larger one is sampled by seeking to a
    /// random position and taking the next member. Hashes and sets keep
    /// their members in hash order, so their draws are close to uniform
    /// (a member's chance is the gap before its hash); a sorted set's
    /// members are in member order, and its draws favour members after
    /// wide gaps in it.
    pub fn random_fields(
        &self,
        slot: u8,
        c: &Coll,
        n: u64,
        repeat: bool,
        rng: &mut impl rand::Rng,
    ) -> Result<Pairs, ModelError> {
        if n == 0 || c.size == 0 {
            return Ok(Vec::new());
        }
        if c.size <= EXACT_SAMPLE || (!repeat && n.saturating_mul(2) >= c.size) {
            return Ok(draw(self.all_fields(slot, c)?, n, repeat, rng));
        }
        let mut out = Vec::with_capacity(n.min(1 << 16) as usize);
        let mut seen = std::collections::HashSet::new();
        let mut attempts = 0u64;
        while (out.len() as u64) < n && attempts < n.saturating_mul(16) {
            attempts += 1;
            let at: [u8; 8] = rng.gen();
            let at = if layout::hashed(c.kind) {
                &at[..layout::HASH_LEN]
            } else {
                &at[..]
            };
            let mut got = None;
            for from in [Some(at), None] {
                self.scan_positions(slot, c, from, &mut |_, m, v| {
                    got = Some((m.to_vec(), v.to_vec()));
                    ControlFlow::Break(())
                })?;
                if got.is_some() {
                    break;
                }
            }
            let Some(pair) = got else {
                break;
            };
            if repeat || seen.insert(pair.0.clone()) {
                out.push(pair);
            }
        }
        Ok(out)
    }

    /// A sorted-set member's score.
    pub fn zscore(&self, slot: u8, c: &Coll, member: &[u8]) -> Result<Option<f64>, ModelError> {
        match self.field(slot, c, member)? {
            Some(v) => Ok(Some(score_of(&v)?)),
            None => Ok(None),
        }
    }

    /// Sets a member's score (`old`: its score now, if a member).
    pub fn zput(
        &mut self,
        slot: u8,
        c: &Coll,
        member: &[u8],
        old: Option<f64>,
        new: f64,
    ) -> Result<(), ModelError> {
        let new_key = layout::score(slot, c.version, new, member)?;
        self.score_written((slot, c.version), &new_key);
        if let Some(o) = old {
            let old_key = layout::score(slot, c.version, o, member)?;
            if old_key == new_key {
                return Ok(());
            }
            self.delete(old_key)?;
        }
        self.put_field(slot, c, member, super::score::encode(new).to_vec())?;
        self.put(new_key, Vec::new())
    }

    /// Removes a member whose score is `score`.
    pub fn zdelete(
        &mut self,
        slot: u8,
        c: &Coll,
        member: &[u8],
        score: f64,
    ) -> Result<(), ModelError> {
        self.delete_field(slot, c, member)?;
        self.delete(layout::score(slot, c.version, score, member)?)
    }

    /// Visits members by score between `lo` and `hi` (ties in member
    /// order), ascending or reversed.
    pub fn scan_scores(
        &self,
        slot: u8,
        c: &Coll,
        lo: Bound<f64>,
        hi: Bound<f64>,
        rev: bool,
        visit: &mut dyn FnMut(f64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ModelError> {
        let (all_start, all_end) = layout::scores(slot, c.version);
        let after = |s: f64| layout::successor(&layout::score_bound(slot, c.version, s));
        let id = (slot, c.version);
        // An open end starts at the collection's mark: nothing live lies
        // past it, only the traces of earlier pops.
        let start = match lo {
            Bound::Included(s) => layout::score_bound(slot, c.version, s),
            Bound::Excluded(s) => after(s).unwrap_or_else(|| all_end.clone()),
            Bound::Unbounded => self
                .mark(id, Mark::Low)
                .filter(|m| *m > all_start)
                .unwrap_or(all_start),
        };
        let end = match hi {
            Bound::Included(s) => after(s).unwrap_or_else(|| all_end.clone()),
            Bound::Excluded(s) => layout::score_bound(slot, c.version, s),
            Bound::Unbounded => self
                .mark(id, Mark::High)
                .and_then(|m| layout::successor(&m))
                .filter(|m| *m < all_end)
                .unwrap_or(all_end),
        };
        if start >= end {
            return Ok(());
        }
        let mut bad = None;
        self.scan(
            &start,
            Some(&end),
            rev,
            &mut |k, _| match layout::decode_score(k) {
                Some((s, m)) => visit(s, m),
                None => {
                    bad = Some(ModelError::Corrupt("a score-index key is malformed".into()));
                    ControlFlow::Break(())
                }
            },
        )?;
        bad.map_or(Ok(()), Err)
    }

    /// Pops up to `count` members, lowest scores first (with `high`,
    /// highest first): reads them, deletes each (member and score entry)
    /// and moves that end's mark past them. Keeping the header's size
    /// right is the caller's part. From the second pop of a collection's
    /// end in one transaction, the members that follow are read ahead
    /// (`pop_queue`), so a pipeline of pops seeks the store once per run
    /// rather than once per pop.
    pub fn pop_scores(
        &mut self,
        slot: u8,
        c: &Coll,
        high: bool,
        count: u64,
    ) -> Result<Vec<(Vec<u8>, f64)>, ModelError> {
        let id = (slot, c.version);
        let which = if high { Mark::High } else { Mark::Low };
        let again = self.pops.note_pop(id, which);
        let mark = self.mark(id, which);
        let queued = self
            .pops
            .take(id, which)
            .filter(|q| Some(&q.anchor) == mark.as_ref())
            .filter(|q| q.complete || q.entries.len() as u64 >= count);
        let mut q = match queued {
            Some(q) => q,
            None => {
                let want = if again {
                    count.saturating_add(READ_AHEAD)
                } else {
                    count
                };
                let mut entries = VecDeque::new();
                self.scan_scores(
                    slot,
                    c,
                    Bound::Unbounded,
                    Bound::Unbounded,
                    high,
                    &mut |s, m| {
                        entries.push_back((s, m.to_vec()));
                        if entries.len() as u64 >= want {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    },
                )?;
                PopQueue {
                    id,
                    which,
                    anchor: Vec::new(),
                    complete: (entries.len() as u64) < want,
                    entries,
                }
            }
        };
        let n = count.min(q.entries.len() as u64) as usize;
        let out: Vec<(Vec<u8>, f64)> = q.entries.drain(..n).map(|(s, m)| (m, s)).collect();
        for (member, s) in &out {
            self.zdelete(slot, c, member, *s)?;
        }
        if let Some((member, s)) = out.last() {
            q.anchor = self.popped_to(slot, c, high, *s, member)?;
            self.pops.put(q);
        }
        Ok(out)
    }

    /// After removing a sorted set's members from its low end (or, with
    /// `high`, its high end) up to `member` with `score`: every
    /// score-index key up to it is gone once this transaction commits.
    /// Gives the mark's key.
    pub fn popped_to(
        &mut self,
        slot: u8,
        c: &Coll,
        high: bool,
        score: f64,
        member: &[u8],
    ) -> Result<Vec<u8>, ModelError> {
        let key = layout::score(slot, c.version, score, member)?;
        let which = if high { Mark::High } else { Mark::Low };
        self.move_mark((slot, c.version), which, key.clone());
        Ok(key)
    }

    /// Members (with values) to pop from a set: `n` of them, all if
    /// fewer. A set of up to [`EXACT_POP`] members gives a uniform
    /// draw; a larger one (and one popped so before) gives the members
    /// that follow, in hash order, where the set's last pop stopped (at
    /// first a random point), so a pop never reads the traces earlier
    /// pops left, and what it gives is still in a random order (the
    /// members' hashes).
    pub fn pop_members(
        &self,
        slot: u8,
        c: &Coll,
        n: u64,
        rng: &mut impl rand::Rng,
    ) -> Result<Pairs, ModelError> {
        let id = (slot, c.version);
        let cursor = self.ks_cursor(id);
        // A set popped by cursor before keeps popping so: a uniform draw
        // would read every member, and the traces of the earlier pops.
        if cursor.is_none() && (c.size <= EXACT_POP || n.saturating_mul(2) >= c.size) {
            return self.random_fields(slot, c, n, false, rng);
        }
        let start = cursor.unwrap_or_else(|| {
            let at: [u8; layout::HASH_LEN] = rng.gen();
            at.to_vec()
        });
        let mut out = Vec::with_capacity(n.min(1 << 16) as usize);
        let mut last = None;
        // From the cursor to the end, then from the start back to it.
        for (from, stop) in [
            (Some(start.as_slice()), None),
            (None, Some(start.as_slice())),
        ] {
            self.scan_positions(slot, c, from, &mut |pos, m, v| {
                if out.len() as u64 >= n || stop.is_some_and(|s| pos >= s) {
                    return ControlFlow::Break(());
                }
                out.push((m.to_vec(), v.to_vec()));
                last = Some(pos.to_vec());
                ControlFlow::Continue(())
            })?;
            if out.len() as u64 >= n {
                break;
            }
        }
        if let Some(p) = last {
            self.ks_set_cursor(id, p);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::meta::Kind;
    use crate::model::testing::keyspace;

    fn members(
        tx: &Tx<'_>,
        c: &Coll,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        rev: bool,
    ) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        tx.scan_members(0, c, lo, hi, rev, &mut |m, _| {
            out.push(m.to_vec());
            ControlFlow::Continue(())
        })
        .unwrap();
        out
    }

    #[test]
    fn member_ranges_honour_their_bounds() {
        let ks = keyspace();
        let mut tx = ks.write();
        let m = tx.new_coll(Kind::ZSet).unwrap();
        let c = *m.coll().unwrap();
        for x in ["a", "b", "ba", "c"] {
            tx.put_field(0, &c, x.as_bytes(), vec![]).unwrap();
        }
        let v = |xs: &[&str]| xs.iter().map(|x| x.as_bytes().to_vec()).collect::<Vec<_>>();
        use Bound::*;
        assert_eq!(
            members(&tx, &c, Included(b"b"), Unbounded, false),
            v(&["b", "ba", "c"])
        );
        assert_eq!(
            members(&tx, &c, Excluded(b"b"), Unbounded, false),
            v(&["ba", "c"])
        );
        assert_eq!(
            members(&tx, &c, Unbounded, Included(b"b"), false),
            v(&["a", "b"])
        );
        assert_eq!(members(&tx, &c, Unbounded, Excluded(b"b"), true), v(&["a"]));
        assert_eq!(members(&tx, &c, Excluded(b"c"), Unbounded, false), v(&[]));
        // A bound longer than any member can be.
        let long = vec![b'b'; MAX_MEMBER + 5];
        assert_eq!(
            members(&tx, &c, Included(&long), Unbounded, false),
            v(&["c"])
        );
        assert_eq!(
            members(&tx, &c, Unbounded, Excluded(&long), false),
            v(&["a", "b", "ba"])
        );
    }

    #[test]
    fn scores_scan_in_order_with_exclusive_bounds() {
        let ks = keyspace();
        let mut tx = ks.write();
        let m = tx.new_coll(Kind::ZSet).unwrap();
        let c = *m.coll().unwrap();
        for (s, x) in [(1.0, "a"), (2.0, "b"), (2.0, "c"), (-3.0, "d")] {
            tx.zput(0, &c, x.as_bytes(), None, s).unwrap();
        }
        tx.zput(0, &c, b"a", Some(1.0), 5.0).unwrap();
        assert_eq!(tx.zscore(0, &c, b"a").unwrap(), Some(5.0));
        let mut got = Vec::new();
        tx.scan_scores(
            0,
            &c,
            Bound::Excluded(-3.0),
            Bound::Included(5.0),
            false,
            &mut |s, m| {
                got.push((s, m.to_vec()));
                ControlFlow::Continue(())
            },
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                (2.0, b"b".to_vec()),
                (2.0, b"c".to_vec()),
                (5.0, b"a".to_vec())
            ]
        );
    }

    /// A set of `n` members `member:00000000`.., written in `tx`.
    fn set_of(tx: &mut Tx<'_>, n: usize) -> Coll {
        let mut m = tx.new_coll(Kind::Set).unwrap();
        let c = m.coll_mut().unwrap();
        for i in 0..n {
            tx.put_field(0, c, format!("member:{i:08}").as_bytes(), vec![])
                .unwrap();
        }
        c.size = n as u64;
        *c
    }

    #[test]
    fn draws_from_a_large_set_reach_nearly_every_member() {
        let ks = keyspace();
        let mut tx = ks.write();
        let n = EXACT_SAMPLE as usize + 1000;
        let c = set_of(&mut tx, n);
        let mut rng = rand::thread_rng();
        let draws = tx
            .random_fields(0, &c, (n * 10) as u64, true, &mut rng)
            .unwrap();
        assert_eq!(draws.len(), n * 10);
        let mut counts = std::collections::HashMap::new();
        for (member, _) in draws {
            *counts.entry(member).or_insert(0u32) += 1;
        }
        // With members in hash order a draw's chance is the gap before its
        // member: every member is reachable, and the busiest stays within
        // a small multiple of the mean (in member order, members after the
        // common prefix "member:" would take nearly every draw).
        assert!(
            counts.len() * 10 >= n * 8,
            "{} of {n} members drawn",
            counts.len()
        );
        let busiest = counts.values().max().copied().unwrap_or(0);
        assert!(
            busiest < 200,
            "one member drawn {busiest} times of a mean of 10"
        );
    }

    #[test]
    fn pops_of_a_set_above_the_exact_size_give_every_member_once() {
        let ks = keyspace();
        let mut tx = ks.write();
        let n = EXACT_POP as usize * 4;
        let mut c = set_of(&mut tx, n);
        let c = &mut c;
        let mut rng = rand::thread_rng();
        let mut popped = std::collections::BTreeSet::new();
        while c.size > 0 {
            let got = tx.pop_members(0, c, 1, &mut rng).unwrap();
            assert_eq!(got.len(), 1, "{} left", c.size);
            let member = got[0].0.clone();
            tx.delete_field(0, c, &member).unwrap();
            c.size -= 1;
            assert!(popped.insert(member), "a member popped twice");
        }
        assert_eq!(popped.len(), n);
    }

    /// What a pop test does, within a transaction or between them.
    #[derive(Debug, Clone)]
    enum PopOp {
        Pop {
            high: bool,
            count: u64,
        },
        Add {
            member: u8,
            score: i8,
        },
        Remove {
            member: u8,
        },
        /// A savepoint, the next two ops, then a rollback to it.
        Undo,
        Commit,
    }

    fn pop_op() -> impl proptest::strategy::Strategy<Value = PopOp> {
        use proptest::prelude::*;
        prop_oneof![
            4 => (any::<bool>(), 0u64..4).prop_map(|(high, count)| PopOp::Pop { high, count }),
            3 => (0u8..24, -6i8..6).prop_map(|(member, score)| PopOp::Add { member, score }),
            1 => (0u8..24).prop_map(|member| PopOp::Remove { member }),
            1 => Just(PopOp::Undo),
            1 => Just(PopOp::Commit),
        ]
    }

    fn apply(
        tx: &mut Tx<'_>,
        c: &Coll,
        model: &mut std::collections::BTreeMap<Vec<u8>, f64>,
        op: &PopOp,
    ) {
        match *op {
            PopOp::Pop { high, count } => {
                let got = tx.pop_scores(0, c, high, count).unwrap();
                let mut order: Vec<(f64, Vec<u8>)> =
                    model.iter().map(|(m, s)| (*s, m.clone())).collect();
                order.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
                if high {
                    order.reverse();
                }
                let want: Vec<(Vec<u8>, f64)> = order
                    .into_iter()
                    .take(count as usize)
                    .map(|(s, m)| (m, s))
                    .collect();
                assert_eq!(got, want, "{op:?}");
                for (m, _) in &got {
                    model.remove(m);
                }
            }
            PopOp::Add { member, score } => {
                let m = vec![b'a' + member];
                let old = tx.zscore(0, c, &m).unwrap();
                assert_eq!(old, model.get(&m).copied());
                tx.zput(0, c, &m, old, f64::from(score)).unwrap();
                model.insert(m, f64::from(score));
            }
            PopOp::Remove { member } => {
                let m = vec![b'a' + member];
                if let Some(s) = tx.zscore(0, c, &m).unwrap() {
                    tx.zdelete(0, c, &m, s).unwrap();
                    model.remove(&m);
                }
            }
            PopOp::Undo | PopOp::Commit => {}
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(64))]
        /// Pops from either end, read ahead within a transaction, give
        /// what a sorted model gives, through adds and removes of members
        /// around them, rollbacks and commits.
        #[test]
        fn pops_read_ahead_agree_with_a_model(
            ops in proptest::collection::vec(pop_op(), 1..120),
        ) {
            let ks = keyspace();
            let mut tx = ks.write();
            let m = tx.new_coll(Kind::ZSet).unwrap();
            let c = *m.coll().unwrap();
            let mut model = std::collections::BTreeMap::new();
            for i in 0..20u8 {
                let member = vec![b'a' + i];
                tx.zput(0, &c, &member, None, f64::from(i % 5)).unwrap();
                model.insert(member, f64::from(i % 5));
            }
            let mut i = 0;
            while i < ops.len() {
                match &ops[i] {
                    PopOp::Commit => {
                        tx.commit().unwrap();
                        tx = ks.write();
                    }
                    PopOp::Undo => {
                        let sp = tx.savepoint();
                        let mut scratch = model.clone();
                        for op in ops.iter().skip(i + 1).take(2) {
                            if !matches!(op, PopOp::Commit | PopOp::Undo) {
                                apply(&mut tx, &c, &mut scratch, op);
                            }
                        }
                        tx.rollback(sp);
                        i += 2;
                    }
                    op => apply(&mut tx, &c, &mut model, op),
                }
                i += 1;
            }
            tx.commit().unwrap();
            let mut tx = ks.write();
            apply(&mut tx, &c, &mut model, &PopOp::Pop { high: false, count: 100 });
        }
    }
}
