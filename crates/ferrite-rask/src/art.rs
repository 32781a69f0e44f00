//! An adaptive radix tree over 8-byte keys: the inner nodes of the index,
//! mapping each leaf's anchor key to the leaf.
//!
//! Keys are compared as big-endian bytes, so byte order is numeric order.
//! Each inner node is one allocation of one of four kinds (4, 16, 48 or
//! 256 children) and grows or shrinks with its children; paths are
//! compressed (a node at byte depth `d` stores one key of its subtree, whose
//! first `d` bytes every key below shares), and a single key's value sits
//! in its parent's child slot (lazy expansion), so a lookup touches one
//! allocation per level.
//!
//! A child slot is one word: empty, a tagged pointer to an inner node, or a
//! tagged value. The tree keeps no key beside a value; every operation
//! takes `key_of`, which returns the key a value was inserted under (RASK's
//! leaves carry their anchors, so the word is the leaf's address). A slot
//! is thus 8 bytes where a key and a value inline take 24, and a full N256
//! node is 2 KiB.
//!
//! The query the index needs is [`Art::predecessor`]: the value with the
//! largest key not above a given one. Invariants: every inner node has at
//! least two children; children are ordered by key byte in every node
//! kind; every value is at most [`MAX_VALUE`], and `key_of` returns for it
//! the key it was inserted under for as long as it is in the tree.

use std::ptr::NonNull;

/// The largest value a slot can hold (two bits of the word are its tag).
pub const MAX_VALUE: usize = usize::MAX >> 2;

const TAG_MASK: usize = 3;
const TAG_INNER: usize = 1;
const TAG_VALUE: usize = 2;

/// An ART map from u64 keys to word-sized values.
pub struct Art {
    root: Slot,
    len: usize,
}

// SAFETY: the tree owns its inner nodes outright; values are plain words.
unsafe impl Send for Art {}
// SAFETY: `&Art` only reads.
unsafe impl Sync for Art {}

/// One child slot: null (empty), an inner node's address with
/// `TAG_INNER`, or a value shifted past the tag with `TAG_VALUE` (an
/// address without provenance).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Slot(*mut Head);

/// What a non-empty slot holds.
enum Child {
    Value(usize),
    Inner(NonNull<Head>),
}

impl Slot {
    const EMPTY: Slot = Slot(std::ptr::null_mut());

    fn value(v: usize) -> Slot {
        assert!(v <= MAX_VALUE, "ART value {v:#x} above MAX_VALUE");
        Slot(std::ptr::without_provenance_mut(v << 2 | TAG_VALUE))
    }

    fn inner(p: NonNull<Head>) -> Slot {
        Slot(p.as_ptr().map_addr(|a| a | TAG_INNER))
    }

    fn is_empty(self) -> bool {
        self.0.is_null()
    }

    fn child(self) -> Option<Child> {
        match self.0.addr() & TAG_MASK {
            TAG_VALUE => Some(Child::Value(self.0.addr() >> 2)),
            // Inner nodes are 8-aligned, so clearing the tag gives back
            // their address, which is not null.
            TAG_INNER => NonNull::new(self.0.map_addr(|a| a & !TAG_MASK)).map(Child::Inner),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    N4,
    N16,
    N48,
    N256,
}

/// The part every inner node starts with: path compression data, kind and
/// child count.
#[derive(Clone, Copy)]
#[repr(C)]
struct Head {
    /// Any key of the subtree; its first `depth` bytes are the path.
    prefix: u64,
    /// The byte this node branches on (0 = most significant).
    depth: u8,
    kind: Kind,
    n: u16,
}

/// Up to `N` children with their key bytes in a sorted array (N4, N16).
#[repr(C)]
struct Sorted<const N: usize> {
    head: Head,
    keys: [u8; N],
    kids: [Slot; N],
}

/// Up to 48 children behind a 256-entry byte index (N48).
#[repr(C)]
struct Indexed {
    head: Head,
    present: [u64; 4],
    index: [u8; 256],
    kids: [Slot; 48],
}

/// A child slot per byte (N256).
#[repr(C)]
struct Direct {
    head: Head,
    present: [u64; 4],
    kids: [Slot; 256],
}

/// The operations every inner node kind provides. Children returned are
/// never empty slots.
trait Inner {
    fn head(&self) -> &Head;
    fn get(&self, b: u8) -> Option<Slot>;
    fn get_mut(&mut self, b: u8) -> Option<&mut Slot>;
    /// The child with the largest byte below `b`.
    fn below(&self, b: u8) -> Option<Slot>;
    fn last(&self) -> Option<Slot>;
    /// Adds a child for a byte not present; false if the node is full.
    fn add(&mut self, b: u8, c: Slot) -> bool;
    fn remove(&mut self, b: u8) -> Option<Slot>;
    /// Every (byte, child), ascending, leaving the node empty.
    fn drain(&mut self) -> Vec<(u8, Slot)>;
}

fn byte_at(key: u64, depth: u8) -> u8 {
    (key >> (56 - 8 * depth as u32)) as u8
}

/// Mask of the first `depth` bytes.
fn prefix_mask(depth: u8) -> u64 {
    if depth == 0 {
        0
    } else {
        !0u64 << (64 - 8 * depth as u32)
    }
}

fn first_diff_byte(a: u64, b: u64) -> u8 {
    ((a ^ b).leading_zeros() / 8) as u8
}

/// The highest byte below `b` whose bit is set in a 256-bit presence map.
fn highest_below(present: &[u64; 4], b: u8) -> Option<u8> {
    let b = b as usize;
    let (word, bit) = (b / 64, b % 64);
    let masked = present[word] & ((1u64 << bit) - 1);
    if masked != 0 {
        return Some((word * 64 + 63 - masked.leading_zeros() as usize) as u8);
    }
    (0..word)
        .rev()
        .find(|&w| present[w] != 0)
        .map(|w| (w * 64 + 63 - present[w].leading_zeros() as usize) as u8)
}

fn set_bit(present: &mut [u64; 4], b: u8, on: bool) {
    let (w, bit) = (b as usize / 64, b % 64);
    if on {
        present[w] |= 1 << bit;
    } else {
        present[w] &= !(1 << bit);
    }
}

fn is_set(present: &[u64; 4], b: u8) -> bool {
    present[b as usize / 64] & (1 << (b % 64)) != 0
}

impl<const N: usize> Sorted<N> {
    fn pos(&self, b: u8) -> Option<usize> {
        let keys = &self.keys[..self.head.n as usize];
        if N <= 4 {
            keys.iter().position(|&k| k == b)
        } else {
            keys.binary_search(&b).ok()
        }
    }
}

impl<const N: usize> Inner for Sorted<N> {
    fn head(&self) -> &Head {
        &self.head
    }
    fn get(&self, b: u8) -> Option<Slot> {
        Some(self.kids[self.pos(b)?])
    }
    fn get_mut(&mut self, b: u8) -> Option<&mut Slot> {
        let i = self.pos(b)?;
        Some(&mut self.kids[i])
    }
    fn below(&self, b: u8) -> Option<Slot> {
        let i = self.keys[..self.head.n as usize].partition_point(|&k| k < b);
        Some(self.kids[i.checked_sub(1)?])
    }
    fn last(&self) -> Option<Slot> {
        Some(self.kids[(self.head.n as usize).checked_sub(1)?])
    }
    fn add(&mut self, b: u8, c: Slot) -> bool {
        let len = self.head.n as usize;
        if len == N {
            return false;
        }
        let i = self.keys[..len].partition_point(|&k| k < b);
        self.keys.copy_within(i..len, i + 1);
        self.kids.copy_within(i..len, i + 1);
        self.keys[i] = b;
        self.kids[i] = c;
        self.head.n += 1;
        true
    }
    fn remove(&mut self, b: u8) -> Option<Slot> {
        let len = self.head.n as usize;
        let i = self.pos(b)?;
        let c = self.kids[i];
        self.keys.copy_within(i + 1..len, i);
        self.kids.copy_within(i + 1..len, i);
        self.kids[len - 1] = Slot::EMPTY;
        self.head.n -= 1;
        Some(c)
    }
    fn drain(&mut self) -> Vec<(u8, Slot)> {
        let len = self.head.n as usize;
        self.head.n = 0;
        (0..len)
            .map(|i| {
                (
                    self.keys[i],
                    std::mem::replace(&mut self.kids[i], Slot::EMPTY),
                )
            })
            .collect()
    }
}

impl Inner for Indexed {
    fn head(&self) -> &Head {
        &self.head
    }
    fn get(&self, b: u8) -> Option<Slot> {
        match self.index[b as usize] {
            0 => None,
            s => Some(self.kids[s as usize - 1]),
        }
    }
    fn get_mut(&mut self, b: u8) -> Option<&mut Slot> {
        match self.index[b as usize] {
            0 => None,
            s => Some(&mut self.kids[s as usize - 1]),
        }
    }
    fn below(&self, b: u8) -> Option<Slot> {
        self.get(highest_below(&self.present, b)?)
    }
    fn last(&self) -> Option<Slot> {
        self.get(255).or_else(|| self.below(255))
    }
    fn add(&mut self, b: u8, c: Slot) -> bool {
        let Some(slot) = self.kids.iter().position(|k| k.is_empty()) else {
            return false;
        };
        self.kids[slot] = c;
        self.index[b as usize] = slot as u8 + 1;
        set_bit(&mut self.present, b, true);
        self.head.n += 1;
        true
    }
    fn remove(&mut self, b: u8) -> Option<Slot> {
        let s = std::mem::replace(&mut self.index[b as usize], 0);
        if s == 0 {
            return None;
        }
        set_bit(&mut self.present, b, false);
        self.head.n -= 1;
        Some(std::mem::replace(
            &mut self.kids[s as usize - 1],
            Slot::EMPTY,
        ))
    }
    fn drain(&mut self) -> Vec<(u8, Slot)> {
        (0..=255u8)
            .filter_map(|b| Some((b, self.remove(b)?)))
            .collect()
    }
}

impl Inner for Direct {
    fn head(&self) -> &Head {
        &self.head
    }
    fn get(&self, b: u8) -> Option<Slot> {
        let c = self.kids[b as usize];
        (!c.is_empty()).then_some(c)
    }
    fn get_mut(&mut self, b: u8) -> Option<&mut Slot> {
        let c = &mut self.kids[b as usize];
        (!c.is_empty()).then_some(c)
    }
    fn below(&self, b: u8) -> Option<Slot> {
        Some(self.kids[highest_below(&self.present, b)? as usize])
    }
    fn last(&self) -> Option<Slot> {
        self.get(255).or_else(|| self.below(255))
    }
    fn add(&mut self, b: u8, c: Slot) -> bool {
        self.kids[b as usize] = c;
        set_bit(&mut self.present, b, true);
        self.head.n += 1;
        true
    }
    fn remove(&mut self, b: u8) -> Option<Slot> {
        if !is_set(&self.present, b) {
            return None;
        }
        set_bit(&mut self.present, b, false);
        self.head.n -= 1;
        Some(std::mem::replace(&mut self.kids[b as usize], Slot::EMPTY))
    }
    fn drain(&mut self) -> Vec<(u8, Slot)> {
        (0..=255u8)
            .filter_map(|b| Some((b, self.remove(b)?)))
            .collect()
    }
}

/// The head of the inner node at `p`.
fn head(p: NonNull<Head>) -> Head {
    // SAFETY: `p` came from a slot of a live tree, so it points at an inner
    // node, and every kind is `repr(C)` with its `Head` first.
    unsafe { *p.as_ptr() }
}

/// Evaluates `$f` with `$x` bound to the inner node at `$p` as its kind,
/// by shared (`ref`) or exclusive (`mut`) reference. Callers hold the tree
/// the same way for as long as the reference lives.
macro_rules! node {
    (ref $p:expr, $x:ident => $f:expr) => {{
        let p: NonNull<Head> = $p;
        match head(p).kind {
            Kind::N4 => {
                // SAFETY: the kind says which node type `p` points at.
                let $x = unsafe { &*p.cast::<Sorted<4>>().as_ptr() };
                $f
            }
            Kind::N16 => {
                // SAFETY: as above.
                let $x = unsafe { &*p.cast::<Sorted<16>>().as_ptr() };
                $f
            }
            Kind::N48 => {
                // SAFETY: as above.
                let $x = unsafe { &*p.cast::<Indexed>().as_ptr() };
                $f
            }
            Kind::N256 => {
                // SAFETY: as above.
                let $x = unsafe { &*p.cast::<Direct>().as_ptr() };
                $f
            }
        }
    }};
    (mut $p:expr, $x:ident => $f:expr) => {{
        let p: NonNull<Head> = $p;
        match head(p).kind {
            Kind::N4 => {
                // SAFETY: the kind says which node type `p` points at; the
                // caller holds the tree exclusively.
                let $x = unsafe { &mut *p.cast::<Sorted<4>>().as_ptr() };
                $f
            }
            Kind::N16 => {
                // SAFETY: as above.
                let $x = unsafe { &mut *p.cast::<Sorted<16>>().as_ptr() };
                $f
            }
            Kind::N48 => {
                // SAFETY: as above.
                let $x = unsafe { &mut *p.cast::<Indexed>().as_ptr() };
                $f
            }
            Kind::N256 => {
                // SAFETY: as above.
                let $x = unsafe { &mut *p.cast::<Direct>().as_ptr() };
                $f
            }
        }
    }};
}

fn alloc<N>(node: N) -> NonNull<Head> {
    NonNull::from(Box::leak(Box::new(node))).cast()
}

/// Frees the inner node at `p` (not its children).
///
/// # Safety
/// `p` came from [`alloc`] and no slot refers to it any more.
unsafe fn free(p: NonNull<Head>) {
    // SAFETY: the kind names the type `alloc` boxed.
    unsafe {
        match head(p).kind {
            Kind::N4 => drop(Box::from_raw(p.cast::<Sorted<4>>().as_ptr())),
            Kind::N16 => drop(Box::from_raw(p.cast::<Sorted<16>>().as_ptr())),
            Kind::N48 => drop(Box::from_raw(p.cast::<Indexed>().as_ptr())),
            Kind::N256 => drop(Box::from_raw(p.cast::<Direct>().as_ptr())),
        }
    }
}

/// A new, empty inner node able to hold `want` children.
fn with_room(prefix: u64, depth: u8, want: usize) -> NonNull<Head> {
    let head = |kind| Head {
        prefix,
        depth,
        kind,
        n: 0,
    };
    if want <= 4 {
        alloc(Sorted::<4> {
            head: head(Kind::N4),
            keys: [0; 4],
            kids: [Slot::EMPTY; 4],
        })
    } else if want <= 16 {
        alloc(Sorted::<16> {
            head: head(Kind::N16),
            keys: [0; 16],
            kids: [Slot::EMPTY; 16],
        })
    } else if want <= 48 {
        alloc(Indexed {
            head: head(Kind::N48),
            present: [0; 4],
            index: [0; 256],
            kids: [Slot::EMPTY; 48],
        })
    } else {
        alloc(Direct {
            head: head(Kind::N256),
            present: [0; 4],
            kids: [Slot::EMPTY; 256],
        })
    }
}

/// Moves the children of the inner node at `p` into a new node of the kind
/// that fits `len + extra` of them, frees `p` and returns the new node.
///
/// # Safety
/// The caller holds the tree exclusively and replaces every slot that
/// refers to `p` with the returned node.
unsafe fn resize(p: NonNull<Head>, extra: usize) -> NonNull<Head> {
    let Head { prefix, depth, .. } = head(p);
    let kids = node!(mut p, x => x.drain());
    let next = with_room(prefix, depth, kids.len() + extra);
    for (b, c) in kids {
        node!(mut next, x => x.add(b, c));
    }
    // SAFETY: emptied above; the caller drops its slot's reference.
    unsafe { free(p) };
    next
}

fn node_bytes(kind: Kind) -> usize {
    match kind {
        Kind::N4 => std::mem::size_of::<Sorted<4>>(),
        Kind::N16 => std::mem::size_of::<Sorted<16>>(),
        Kind::N48 => std::mem::size_of::<Indexed>(),
        Kind::N256 => std::mem::size_of::<Direct>(),
    }
}

/// Every inner node below and including `s`, children before parents.
fn for_each_inner(s: Slot, f: &mut impl FnMut(NonNull<Head>)) {
    if let Some(Child::Inner(p)) = s.child() {
        let mut kids = Vec::new();
        node!(ref p, x => {
            for b in 0..=255u8 {
                kids.extend(x.get(b));
            }
        });
        for c in kids {
            for_each_inner(c, f);
        }
        f(p);
    }
}

impl Default for Art {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Art {
    fn drop(&mut self) {
        // SAFETY: children are visited before their parent, and the tree is
        // going away, so no slot is read after its node is freed.
        for_each_inner(self.root, &mut |p| unsafe { free(p) });
    }
}

impl Art {
    pub fn new() -> Self {
        Self {
            root: Slot::EMPTY,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The value stored under `key`.
    pub fn get(&self, key: u64, key_of: impl Fn(usize) -> u64) -> Option<usize> {
        let mut s = self.root;
        loop {
            match s.child()? {
                Child::Value(v) => return (key_of(v) == key).then_some(v),
                Child::Inner(p) => s = node!(ref p, x => x.get(byte_at(key, x.head().depth)))?,
            }
        }
    }

    /// The value with the largest key `<= key`.
    pub fn predecessor(&self, key: u64, key_of: impl Fn(usize) -> u64) -> Option<usize> {
        pred(self.root, key, &key_of)
    }

    /// Inserts `val` under `key` (`key_of(val)` must return `key` from now
    /// on) or replaces the value there; returns the previous value.
    ///
    /// # Panics
    /// If `val` is above [`MAX_VALUE`].
    pub fn insert(&mut self, key: u64, val: usize, key_of: impl Fn(usize) -> u64) -> Option<usize> {
        let old = insert(&mut self.root, key, val, &key_of);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes and returns the value under `key`.
    pub fn remove(&mut self, key: u64, key_of: impl Fn(usize) -> u64) -> Option<usize> {
        let old = match self.root.child()? {
            Child::Value(v) if key_of(v) == key => {
                self.root = Slot::EMPTY;
                v
            }
            Child::Value(_) => return None,
            // SAFETY: `&mut self` holds the tree exclusively.
            Child::Inner(_) => unsafe { remove(&mut self.root, key, &key_of) }?,
        };
        self.len -= 1;
        Some(old)
    }

    /// Heap bytes of the tree's inner nodes.
    pub fn heap_bytes(&self) -> usize {
        let mut bytes = 0;
        for_each_inner(self.root, &mut |p| bytes += node_bytes(head(p).kind));
        bytes
    }
}

fn max_of(mut s: Slot) -> Option<usize> {
    loop {
        match s.child()? {
            Child::Value(v) => return Some(v),
            Child::Inner(p) => s = node!(ref p, x => x.last())?,
        }
    }
}

fn pred(s: Slot, key: u64, key_of: &impl Fn(usize) -> u64) -> Option<usize> {
    let p = match s.child()? {
        Child::Value(v) => return (key_of(v) <= key).then_some(v),
        Child::Inner(p) => p,
    };
    let Head { prefix, depth, .. } = head(p);
    let mask = prefix_mask(depth);
    let (mine, theirs) = (key & mask, prefix & mask);
    if mine != theirs {
        // The whole subtree is on one side of `key`.
        return if theirs < mine { max_of(s) } else { None };
    }
    let b = byte_at(key, depth);
    let at = node!(ref p, x => x.get(b));
    if let Some(hit) = at.and_then(|c| pred(c, key, key_of)) {
        return Some(hit);
    }
    // Only when nothing at `b` is at or below `key`: the largest key left
    // of it.
    node!(ref p, x => x.below(b)).and_then(max_of)
}

fn insert(slot: &mut Slot, key: u64, val: usize, key_of: &impl Fn(usize) -> u64) -> Option<usize> {
    let p = match slot.child() {
        None => {
            *slot = Slot::value(val);
            return None;
        }
        Some(Child::Value(v)) => {
            let other = key_of(v);
            if other == key {
                *slot = Slot::value(val);
                return Some(v);
            }
            split_at(slot, other, key, val);
            return None;
        }
        Some(Child::Inner(p)) => p,
    };
    let Head { prefix, depth, .. } = head(p);
    if first_diff_byte(prefix, key) < depth {
        split_at(slot, prefix, key, val);
        return None;
    }
    let b = byte_at(key, depth);
    if let Some(c) = node!(mut p, x => x.get_mut(b)) {
        return insert(c, key, val, key_of);
    }
    if !node!(mut p, x => x.add(b, Slot::value(val))) {
        // SAFETY: the tree is held through `slot`, which takes the new node.
        let grown = unsafe { resize(p, 1) };
        node!(mut grown, x => x.add(b, Slot::value(val)));
        *slot = Slot::inner(grown);
    }
    None
}

/// Replaces `slot` (whose keys share `other`'s path) with a new N4 at the
/// first byte where `other` and `key` differ, holding both.
fn split_at(slot: &mut Slot, other: u64, key: u64, val: usize) {
    let depth = first_diff_byte(other, key);
    let n4 = with_room(key, depth, 2);
    node!(mut n4, x => {
        x.add(byte_at(other, depth), *slot);
        x.add(byte_at(key, depth), Slot::value(val));
    });
    *slot = Slot::inner(n4);
}

/// Removes `key` from below the inner node in `slot`.
///
/// # Safety
/// `slot` holds an inner node and the caller holds the tree exclusively.
unsafe fn remove(slot: &mut Slot, key: u64, key_of: &impl Fn(usize) -> u64) -> Option<usize> {
    let Some(Child::Inner(p)) = slot.child() else {
        return None;
    };
    let Head { prefix, depth, .. } = head(p);
    if first_diff_byte(prefix, key) < depth {
        return None;
    }
    let b = byte_at(key, depth);
    let child = node!(mut p, x => x.get_mut(b))?;
    let old = match child.child()? {
        Child::Value(v) if key_of(v) == key => {
            node!(mut p, x => x.remove(b));
            v
        }
        Child::Value(_) => return None,
        // SAFETY: as for this call.
        Child::Inner(_) => unsafe { remove(child, key, key_of) }?,
    };
    let Head { kind, n, .. } = head(p);
    if n == 1 {
        // Path compression: a one-child inner node is replaced by its child.
        let only = node!(mut p, x => x.drain()).pop().map(|(_, c)| c);
        *slot = only.unwrap_or(Slot::EMPTY);
        // SAFETY: emptied, and `slot` no longer refers to it.
        unsafe { free(p) };
    } else if match kind {
        Kind::N4 => false,
        Kind::N16 => n <= 3,
        Kind::N48 => n <= 12,
        Kind::N256 => n <= 37,
    } {
        // SAFETY: `slot` takes the new node.
        *slot = Slot::inner(unsafe { resize(p, 0) });
    }
    Some(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn grows_and_shrinks_through_every_node_kind() {
        // Value k lives under key 3k.
        let key_of = |v: usize| v as u64 * 3;
        let mut art = Art::new();
        for k in 0..300usize {
            art.insert(key_of(k), k, key_of);
        }
        assert_eq!(art.len(), 300);
        assert_eq!(art.predecessor(301, key_of), Some(100));
        assert_eq!(art.predecessor(0, key_of), Some(0));
        for k in 0..300usize {
            if k % 7 != 0 {
                assert_eq!(art.remove(key_of(k), key_of), Some(k));
            }
        }
        assert_eq!(art.predecessor(301, key_of), Some(98));
        assert_eq!(art.get(21, key_of), Some(7));
        assert_eq!(art.get(24, key_of), None);
    }

    #[test]
    fn a_slot_is_one_word_and_nodes_are_sized_by_it() {
        assert_eq!(std::mem::size_of::<Slot>(), 8);
        assert_eq!(std::mem::size_of::<Head>(), 16);
        assert_eq!(std::mem::size_of::<Sorted<4>>(), 56);
        assert_eq!(std::mem::size_of::<Direct>(), 16 + 32 + 256 * 8);
        // One N256 node's worth of keys sharing seven bytes.
        let key_of = |v: usize| v as u64;
        let mut art = Art::new();
        for k in 0..256usize {
            art.insert(k as u64, k, key_of);
        }
        assert_eq!(art.heap_bytes(), std::mem::size_of::<Direct>());
        for k in 0..255usize {
            art.remove(k as u64, key_of);
        }
        assert_eq!(art.heap_bytes(), 0);
        assert_eq!(art.get(255, key_of), Some(255));
    }

    proptest! {
        #[test]
        fn matches_a_btreemap(ops in proptest::collection::vec((0u8..3, any::<u64>(), 0u64..2000), 1..400)) {
            // Values index `keys`, which records the key each was
            // inserted under.
            let mut keys: Vec<u64> = Vec::new();
            let mut art = Art::new();
            let mut model = BTreeMap::new();
            for (op, wide, small) in ops {
                // Mix clustered and spread keys so prefixes are shared.
                let key = if wide % 2 == 0 { small } else { wide };
                match op {
                    0 => {
                        keys.push(key);
                        let v = keys.len() - 1;
                        let got = art.insert(key, v, |v| keys[v]);
                        prop_assert_eq!(got, model.insert(key, v));
                    }
                    1 => prop_assert_eq!(art.remove(key, |v| keys[v]), model.remove(&key)),
                    _ => {
                        let want = model.range(..=key).next_back().map(|(_, v)| *v);
                        prop_assert_eq!(art.predecessor(key, |v| keys[v]), want);
                        prop_assert_eq!(art.get(key, |v| keys[v]), model.get(&key).copied());
                    }
                }
                prop_assert_eq!(art.len(), model.len());
            }
            for probe in [0, 1, 999, u64::MAX] {
                let want = model.range(..=probe).next_back().map(|(_, v)| *v);
                prop_assert_eq!(art.predecessor(probe, |v| keys[v]), want);
            }
        }
    }
}
