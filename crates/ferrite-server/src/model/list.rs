//! A list's items in either of its two encodings: packed (every item in
//! one record beside the metadata, a listpack, while the list is small)
//! or one record per item keyed by its position. Both address items by
//! position, `head..head + size`; commands move `head` and `size` as the
//! item operations tell them, and see no difference, except that the
//! list commands ask [`Tx::list_grow`] before adding and
//! [`Tx::list_shrink`] after removing, which switch encodings.
//!
//! Packed record, `[0x10][slot][version][0x03]`:
//!
//! ```text
//! first position u64 BE | listpack of the items, in order
//! ```
//!
//! Invariants: a packed list's items sit at contiguous positions from
//! the record's own first position (the metadata's `head` matches it
//! between commands; within one the record leads, as a left push
//! moves it before the caller moves `head`), so an item operation may
//! touch a position inside them or just outside either end, and a
//! removal takes items from an end; anything else is refused as corrupt,
//! never half done. A packed list with no items has no record.

use std::ops::ControlFlow;

use super::layout;
use super::listpack::Listpack;
use super::meta::Coll;
use super::tx::Tx;
use super::ModelError;

/// A list's two ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListEnd {
    Left,
    Right,
}

/// Most items a list of item records may have for a removal to try
/// packing it again (reading them all to measure).
const REPACK_MAX_ITEMS: u64 = 128;

/// Largest listpack of a list node whatever the limit: Redis's
/// `SIZE_SAFETY_LIMIT` for a count-limited node.
const SAFETY_BYTES: u64 = 8192;

/// When a list stays packed: Redis's `list-max-listpack-size` (a
/// positive count of items, or -1 to -5 for 4 to 64 KiB of listpack).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListLimits {
    pub fill: i64,
}

impl ListLimits {
    pub const DEFAULT: ListLimits = ListLimits { fill: -2 };

    /// Bytes and items a node may hold (`quicklistNodeLimit`).
    fn node(self) -> (u64, u64) {
        if self.fill >= 0 {
            (u64::MAX, self.fill.max(1) as u64)
        } else {
            let level = (self.fill.unsigned_abs() - 1).min(4);
            (4096 << level, u64::MAX)
        }
    }

    /// Whether a listpack of `bytes` holding `count` items is too big.
    pub fn exceeded(self, bytes: u64, count: u64) -> bool {
        match self.node() {
            (u64::MAX, most) => bytes > SAFETY_BYTES || count > most,
            (most, _) => bytes > most,
        }
    }

    /// Whether a list this small packs again after a removal: within
    /// half of each limit, as Redis converts back.
    pub fn repacks(self, bytes: u64, count: u64) -> bool {
        let (b, c) = self.node();
        (b == u64::MAX || bytes <= b / 2) && (c == u64::MAX || count <= c / 2)
    }
}

/// A packed list's record, decoded.
struct Node {
    first: u64,
    items: Vec<Vec<u8>>,
}

impl Node {
    /// The index of `position` among the items.
    fn index(&self, position: u64) -> Option<usize> {
        let i = position.wrapping_sub(self.first);
        (i < self.items.len() as u64).then_some(i as usize)
    }

    fn position(&self, i: usize) -> u64 {
        self.first.wrapping_add(i as u64)
    }

    fn listpack(&self) -> Listpack {
        Listpack::of(self.items.iter().map(Vec::as_slice))
    }
}

fn misplaced(what: &str) -> ModelError {
    ModelError::Corrupt(format!(
        "a packed list's items are contiguous: {what} outside them"
    ))
}

impl Tx<'_> {
    fn node(&self, slot: u8, c: &Coll) -> Result<Node, ModelError> {
        let Some(b) = self.get(&layout::list_node(slot, c.version))? else {
            return Ok(Node {
                first: c.head,
                items: Vec::new(),
            });
        };
        let corrupt = || ModelError::Corrupt("a packed list's record is malformed".into());
        let (first, lp) = b.split_first_chunk::<8>().ok_or_else(corrupt)?;
        let lp = Listpack::decode(lp).map_err(|_| corrupt())?;
        Ok(Node {
            first: u64::from_be_bytes(*first),
            items: lp.iter().map(|e| e.to_vec()).collect(),
        })
    }

    fn write_node(&mut self, slot: u8, c: &Coll, n: &Node) -> Result<(), ModelError> {
        let key = layout::list_node(slot, c.version);
        if n.items.is_empty() {
            return self.delete(key);
        }
        let lp = n.listpack();
        let mut v = Vec::with_capacity(8 + lp.as_bytes().len());
        v.extend_from_slice(&n.first.to_be_bytes());
        v.extend_from_slice(lp.as_bytes());
        self.put(key, v)
    }

    /// The list item at `position`.
    pub fn item(&self, slot: u8, c: &Coll, position: u64) -> Result<Option<Vec<u8>>, ModelError> {
        if !c.packed {
            return self.get(&layout::item(slot, c.version, position));
        }
        let mut n = self.node(slot, c)?;
        Ok(n.index(position).map(|i| n.items.swap_remove(i)))
    }

    /// Writes the item at `position`: one present, or one just before
    /// the first or after the last.
    pub fn put_item(
        &mut self,
        slot: u8,
        c: &Coll,
        position: u64,
        value: Vec<u8>,
    ) -> Result<(), ModelError> {
        if !c.packed {
            return self.put(layout::item(slot, c.version, position), value);
        }
        let mut n = self.node(slot, c)?;
        if let Some(i) = n.index(position) {
            n.items[i] = value;
        } else if n.items.is_empty() {
            n.first = position;
            n.items.push(value);
        } else if position == n.first.wrapping_sub(1) {
            n.items.insert(0, value);
            n.first = position;
        } else if position == n.position(n.items.len()) {
            n.items.push(value);
        } else {
            return Err(misplaced("a write"));
        }
        self.write_node(slot, c, &n)
    }

    /// Deletes the item at `position` (a point delete; in a packed list,
    /// an item at one end).
    pub fn delete_item(&mut self, slot: u8, c: &Coll, position: u64) -> Result<(), ModelError> {
        if !c.packed {
            // Not a range of one: an LSM-tree's readers pay for every
            // range tombstone until compaction, and pops make many.
            return self.delete(layout::item(slot, c.version, position));
        }
        self.delete_items(slot, c, position, position)
    }

    /// Deletes the list items at positions `from..=to` (one range delete;
    /// in a packed list, items at one end).
    pub fn delete_items(
        &mut self,
        slot: u8,
        c: &Coll,
        from: u64,
        to: u64,
    ) -> Result<(), ModelError> {
        if from > to {
            return Ok(());
        }
        if !c.packed {
            let start = layout::item(slot, c.version, from);
            let end = match to.checked_add(1) {
                Some(t) => layout::item(slot, c.version, t),
                None => layout::collection(slot, c.version).1,
            };
            return self.delete_range(start, end);
        }
        let mut n = self.node(slot, c)?;
        let len = n.items.len();
        let Some(lo) = n.index(from) else {
            // Nothing of the range is held past the last item.
            return match n.index(to) {
                None if len == 0 || from > n.position(len - 1) => Ok(()),
                _ => Err(misplaced("a removal")),
            };
        };
        let hi = n.index(to).unwrap_or(len - 1);
        if lo == 0 {
            n.items.drain(..=hi);
            n.first = n.first.wrapping_add(hi as u64 + 1);
        } else if hi == len - 1 {
            n.items.truncate(lo);
        } else {
            return Err(misplaced("a removal"));
        }
        self.write_node(slot, c, &n)
    }

    /// Visits list items at positions `from..=to`, ascending or reversed.
    pub fn scan_items(
        &self,
        slot: u8,
        c: &Coll,
        from: u64,
        to: u64,
        rev: bool,
        visit: &mut dyn FnMut(u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), ModelError> {
        if from > to {
            return Ok(());
        }
        if c.packed {
            let n = self.node(slot, c)?;
            let inside = |i: &usize| (from..=to).contains(&n.position(*i));
            let order: Box<dyn Iterator<Item = usize>> = if rev {
                Box::new((0..n.items.len()).rev().filter(inside))
            } else {
                Box::new((0..n.items.len()).filter(inside))
            };
            for i in order {
                if visit(n.position(i), &n.items[i]).is_break() {
                    break;
                }
            }
            return Ok(());
        }
        let start = layout::item(slot, c.version, from);
        let end = match to.checked_add(1) {
            Some(t) => layout::item(slot, c.version, t),
            None => layout::collection(slot, c.version).1,
        };
        let mut bad = false;
        self.scan(
            &start,
            Some(&end),
            rev,
            &mut |k, v| match layout::decode_item(k) {
                Some(p) => visit(p, v),
                None => {
                    bad = true;
                    ControlFlow::Break(())
                }
            },
        )?;
        if bad {
            return Err(ModelError::Corrupt("a list item key is malformed".into()));
        }
        Ok(())
    }

    /// Pushes `value` at `end` of the list `c` (moving its head or size).
    pub fn push_item(
        &mut self,
        slot: u8,
        c: &mut Coll,
        end: ListEnd,
        value: Vec<u8>,
    ) -> Result<(), ModelError> {
        let position = match end {
            ListEnd::Left => c.head.wrapping_sub(1),
            ListEnd::Right => c.head.wrapping_add(c.size),
        };
        self.put_item(slot, c, position, value)?;
        if end == ListEnd::Left {
            c.head = position;
        }
        c.size += 1;
        Ok(())
    }

    /// Removes and returns the item at `end` of the list `c`.
    pub fn pop_item(
        &mut self,
        slot: u8,
        c: &mut Coll,
        end: ListEnd,
    ) -> Result<Option<Vec<u8>>, ModelError> {
        if c.size == 0 {
            return Ok(None);
        }
        let position = match end {
            ListEnd::Left => c.head,
            ListEnd::Right => c.head.wrapping_add(c.size - 1),
        };
        if c.packed {
            // One read and one write of the record, not one each for
            // the item and its removal.
            let mut n = self.node(slot, c)?;
            let value = match (end, n.index(position)) {
                (ListEnd::Left, Some(0)) => {
                    n.first = n.first.wrapping_add(1);
                    n.items.remove(0)
                }
                (ListEnd::Right, Some(i)) if i + 1 == n.items.len() => n.items.remove(i),
                _ => {
                    return Err(ModelError::Corrupt(
                        "a list is missing an item inside its bounds".into(),
                    ))
                }
            };
            self.write_node(slot, c, &n)?;
            if end == ListEnd::Left {
                c.head = c.head.wrapping_add(1);
            }
            c.size -= 1;
            return Ok(Some(value));
        }
        let value = self.item(slot, c, position)?.ok_or_else(|| {
            ModelError::Corrupt("a list is missing an item inside its bounds".into())
        })?;
        self.delete_item(slot, c, position)?;
        if end == ListEnd::Left {
            c.head = c.head.wrapping_add(1);
        }
        c.size -= 1;
        Ok(Some(value))
    }

    /// Before `items` join the list `c`: turns a packed list into item
    /// records if its listpack and their bytes would pass `limits` (the
    /// estimate Redis makes: the listpack's bytes now plus the items'
    /// lengths).
    pub fn list_grow(
        &mut self,
        slot: u8,
        c: &mut Coll,
        items: &[&[u8]],
        limits: ListLimits,
    ) -> Result<(), ModelError> {
        if !c.packed {
            return Ok(());
        }
        let n = self.node(slot, c)?;
        let bytes = n.listpack().as_bytes().len() as u64;
        let added: u64 = items.iter().map(|i| i.len() as u64).sum();
        let count = (n.items.len() + items.len()) as u64;
        if !limits.exceeded(bytes + added, count) {
            return Ok(());
        }
        for (i, v) in n.items.into_iter().enumerate() {
            self.put(
                layout::item(slot, c.version, n.first.wrapping_add(i as u64)),
                v,
            )?;
        }
        self.delete(layout::list_node(slot, c.version))?;
        c.packed = false;
        Ok(())
    }

    /// After items left the list `c`: packs a list of item records again
    /// when it is within half of `limits` (and at most
    /// [`REPACK_MAX_ITEMS`] items, so the check reads little).
    pub fn list_shrink(
        &mut self,
        slot: u8,
        c: &mut Coll,
        limits: ListLimits,
    ) -> Result<(), ModelError> {
        if c.packed || c.size == 0 || c.size > REPACK_MAX_ITEMS || !limits.repacks(0, c.size) {
            return Ok(());
        }
        let last = c.head.wrapping_add(c.size - 1);
        let mut items = Vec::with_capacity(c.size as usize);
        // The items' bytes alone past the limit end the read early, so a
        // list of large items pays little per removal for being short.
        let mut bytes = 0u64;
        let mut over = false;
        self.scan_items(slot, c, c.head, last, false, &mut |_, v| {
            bytes += v.len() as u64;
            if !limits.repacks(bytes, 0) {
                over = true;
                return ControlFlow::Break(());
            }
            items.push(v.to_vec());
            ControlFlow::Continue(())
        })?;
        if over {
            return Ok(());
        }
        let n = Node {
            first: c.head,
            items,
        };
        if !limits.repacks(n.listpack().as_bytes().len() as u64, c.size) {
            return Ok(());
        }
        self.delete_items(slot, c, c.head, last)?;
        c.packed = true;
        self.write_node(slot, c, &n)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use proptest::prelude::*;

    use super::*;
    use crate::model::meta::Kind;
    use crate::model::testing::keyspace;

    fn items(tx: &Tx<'_>, c: &Coll) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        if c.size == 0 {
            return got;
        }
        let (from, to) = (c.head, c.head.wrapping_add(c.size - 1));
        tx.scan_items(0, c, from, to, false, &mut |_, v| {
            got.push(v.to_vec());
            ControlFlow::Continue(())
        })
        .unwrap();
        got
    }

    #[test]
    fn lists_push_and_pop_at_both_ends() {
        for packed in [false, true] {
            let ks = keyspace();
            let mut tx = ks.write();
            let mut m = tx.new_coll(Kind::List).unwrap();
            let c = m.coll_mut().unwrap();
            c.packed = packed;
            tx.push_item(0, c, ListEnd::Right, b"b".to_vec()).unwrap();
            tx.push_item(0, c, ListEnd::Left, b"a".to_vec()).unwrap();
            tx.push_item(0, c, ListEnd::Right, b"c".to_vec()).unwrap();
            assert_eq!(
                items(&tx, c),
                vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
            );
            assert_eq!(
                tx.pop_item(0, c, ListEnd::Right).unwrap(),
                Some(b"c".to_vec())
            );
            assert_eq!(
                tx.pop_item(0, c, ListEnd::Left).unwrap(),
                Some(b"a".to_vec())
            );
            assert_eq!(c.size, 1);
        }
    }

    #[test]
    fn pops_from_item_records_delete_points_not_ranges() {
        let ks = keyspace();
        let mut tx = ks.write();
        let mut m = tx.new_coll(Kind::List).unwrap();
        let c = m.coll_mut().unwrap();
        for v in ["a", "b", "c"] {
            tx.push_item(0, c, ListEnd::Right, v.as_bytes().to_vec())
                .unwrap();
        }
        tx.pop_item(0, c, ListEnd::Right).unwrap();
        tx.pop_item(0, c, ListEnd::Left).unwrap();
        assert_eq!(tx.range_deletes(), 0);
        assert_eq!(items(&tx, c), vec![b"b".to_vec()]);
    }

    #[test]
    fn a_packed_list_refuses_a_hole() {
        let ks = keyspace();
        let mut tx = ks.write();
        let mut m = tx.new_coll(Kind::List).unwrap();
        let c = m.coll_mut().unwrap();
        c.packed = true;
        for v in ["a", "b", "c"] {
            tx.push_item(0, c, ListEnd::Right, v.as_bytes().to_vec())
                .unwrap();
        }
        let mid = c.head + 1;
        assert!(tx.delete_item(0, c, mid).is_err());
        assert!(tx.put_item(0, c, c.head + 5, b"x".to_vec()).is_err());
        assert_eq!(items(&tx, c).len(), 3, "a refused change changes nothing");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Push(bool, usize),
        Pop(bool),
        Trim(usize, usize),
        Set(usize, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<bool>(), 0usize..40).prop_map(|(l, n)| Op::Push(l, n)),
            2 => any::<bool>().prop_map(Op::Pop),
            1 => (0usize..6, 0usize..6).prop_map(|(a, b)| Op::Trim(a, b)),
            1 => (0usize..8, 0usize..40).prop_map(|(i, n)| Op::Set(i, n)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Against a `VecDeque`, with the encoding switched as the list
        /// commands switch it: the same items in either encoding, packed
        /// exactly while the limits say so.
        #[test]
        fn a_list_is_a_deque_in_either_encoding(
            ops in proptest::collection::vec(op(), 1..80),
            fill in prop_oneof![Just(-1i64), Just(2), Just(5)],
        ) {
            let limits = ListLimits { fill };
            let ks = keyspace();
            let mut tx = ks.write();
            let mut m = tx.new_coll(Kind::List).unwrap();
            let c = m.coll_mut().unwrap();
            c.packed = true;
            let mut model: VecDeque<Vec<u8>> = VecDeque::new();
            for (k, o) in ops.into_iter().enumerate() {
                match o {
                    Op::Push(left, n) => {
                        let v = vec![b'a' + (k % 26) as u8; n * 20];
                        tx.list_grow(0, c, &[&v], limits).unwrap();
                        let end = if left { ListEnd::Left } else { ListEnd::Right };
                        tx.push_item(0, c, end, v.clone()).unwrap();
                        if left { model.push_front(v) } else { model.push_back(v) }
                    }
                    Op::Pop(left) => {
                        let end = if left { ListEnd::Left } else { ListEnd::Right };
                        let got = tx.pop_item(0, c, end).unwrap();
                        let want = if left { model.pop_front() } else { model.pop_back() };
                        prop_assert_eq!(got, want);
                        tx.list_shrink(0, c, limits).unwrap();
                    }
                    Op::Trim(front, back) => {
                        let len = model.len();
                        let front = front.min(len);
                        let back = back.min(len - front);
                        if front > 0 {
                            tx.delete_items(0, c, c.head, c.head + front as u64 - 1).unwrap();
                        }
                        if back > 0 {
                            let last = c.head + len as u64 - 1;
                            tx.delete_items(0, c, last + 1 - back as u64, last).unwrap();
                        }
                        c.head += front as u64;
                        c.size -= (front + back) as u64;
                        model.drain(..front);
                        model.truncate(model.len() - back);
                        tx.list_shrink(0, c, limits).unwrap();
                    }
                    Op::Set(i, n) if i < model.len() => {
                        let v = vec![b'z'; n];
                        tx.list_grow(0, c, &[&v], limits).unwrap();
                        tx.put_item(0, c, c.head + i as u64, v.clone()).unwrap();
                        model[i] = v;
                    }
                    Op::Set(..) => {}
                }
                prop_assert_eq!(c.size, model.len() as u64);
                let want: Vec<Vec<u8>> = model.iter().cloned().collect();
                prop_assert_eq!(items(&tx, c), want.clone());
                if c.packed {
                    let n = tx.node(0, c).unwrap();
                    prop_assert_eq!(n.first, c.head);
                    // Redis's estimate (the items' lengths, not their
                    // entries) may pass the limit by one entry's overhead.
                    let bytes = n.listpack().as_bytes().len() as u64;
                    prop_assert!(!limits.exceeded(bytes.saturating_sub(16), want.len() as u64));
                }
                for (i, v) in want.iter().enumerate() {
                    let got = tx.item(0, c, c.head + i as u64).unwrap();
                    prop_assert_eq!(got.as_ref(), Some(v));
                }
            }
        }
    }

    #[test]
    fn limits_are_redis_s() {
        let bytes = ListLimits { fill: -2 };
        assert!(!bytes.exceeded(8192, 1 << 20));
        assert!(bytes.exceeded(8193, 1));
        assert!(bytes.repacks(4096, 1 << 20) && !bytes.repacks(4097, 1));
        let five = ListLimits { fill: 5 };
        assert!(!five.exceeded(100, 5) && five.exceeded(100, 6));
        assert!(
            five.exceeded(8193, 1),
            "a count limit keeps the safety limit"
        );
        assert!(five.repacks(1 << 20, 2) && !five.repacks(1, 3));
        assert_eq!(ListLimits { fill: -9 }.node().0, 65536);
    }
}
