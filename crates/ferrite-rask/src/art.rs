//! An adaptive radix tree over 8-byte keys: the inner nodes of the index,
//! mapping each leaf's anchor key to the leaf. Readers take no lock.
//!
//! Keys are compared as big-endian bytes, so byte order is numeric order.
//! Each inner node is one allocation of one of four kinds (4, 16, 48 or
//! 256 children); paths are compressed (a node at byte depth `d` stores
//! one key of its subtree, whose first `d` bytes every key below shares),
//! and a single key's value sits in its parent's child slot (lazy
//! expansion), so a lookup touches one allocation per level.
//!
//! A child slot is one atomic word: empty, a tagged pointer to an inner
//! node, or a tagged value. The tree keeps no key beside a value; every
//! operation takes `key_of`, which returns the key a value was inserted
//! under (RASK's leaves carry their anchors, so the word is the leaf's
//! address). A slot is thus 8 bytes where a key and a value inline take
//! 24, and a full N256 node is 2 KiB.
//!
//! The query the index needs is [`Art::predecessor`]: the value with the
//! largest key not above a given one.
//!
//! Concurrency, after ROWEX (read-optimised write exclusion, from "The ART
//! of Practical Synchronization", which RASK's inner nodes follow), with
//! one writer lock for the whole tree rather than one per node: writers
//! are rare here (one per split or merge), readers are on every lookup
//! and never wait or retry. A writer changes
//! a published node only by single atomic stores a reader may see in any
//! interleaving:
//! - a child slot is replaced by one holding the same keys (a value by a
//!   new value for the same key, or by an N4 holding it and a new key; a
//!   node by its copy, or by its only remaining child);
//! - a node gains or loses a child in place. An N4 or N16 keeps its
//!   children unsorted in the order they came: a new byte takes the next
//!   slot, stored before the count of slots in use is raised; a removed
//!   child's slot is emptied and kept for its byte. An N48 or N256 stores
//!   the child before marking its byte present, and unmarks it before
//!   clearing it. No slot ever moves to another byte, so a byte a reader
//!   found maps to that byte's child or to nothing;
//! - a node that runs out of slots, or shrinks past its kind, is rebuilt
//!   and swapped into its parent's slot.
//!
//! Nodes a writer unlinks are retired through crossbeam-epoch and freed
//! once no reader pinned before the swap is left; readers must be pinned
//! for as long as they use what a lookup returned. Invariants, between
//! writes: every inner node has at least two children; a node's children
//! have distinct bytes; every value is at most [`MAX_VALUE`], and `key_of`
//! returns for it the key it was inserted under for as long as a pinned
//! reader can reach it. A reader racing a writer may see a value inserted
//! after it started, or miss one removed meanwhile; a key present
//! throughout is always found, and a predecessor is never above the key
//! asked for nor below a key present throughout that is not.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU16, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crossbeam_epoch::Guard;
use parking_lot::Mutex;

/// The largest value a slot can hold (two bits of the word are its tag).
pub const MAX_VALUE: usize = usize::MAX >> 2;

const TAG_MASK: usize = 3;
const TAG_INNER: usize = 1;
const TAG_VALUE: usize = 2;

/// An ART map from u64 keys to word-sized values.
pub struct Art {
    root: AtomicSlot,
    len: AtomicUsize,
    /// Held by every change to the tree.
    writer: Mutex<()>,
}

/// One child slot's content: null (empty), an inner node's address with
/// `TAG_INNER`, or a value shifted past the tag with `TAG_VALUE` (an
/// address without provenance).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Slot(*mut Head);

/// What a non-empty slot holds.
enum Child {
    Value(usize),
    Inner(NonNull<Head>),
}

impl Slot {
    const EMPTY: Slot = Slot(std::ptr::null_mut());

    #[inline]
    fn value(v: usize) -> Slot {
        assert!(v <= MAX_VALUE, "ART value {v:#x} above MAX_VALUE");
        Slot(std::ptr::without_provenance_mut(v << 2 | TAG_VALUE))
    }

    #[inline]
    fn inner(p: NonNull<Head>) -> Slot {
        Slot(p.as_ptr().map_addr(|a| a | TAG_INNER))
    }

    #[inline]
    fn is_empty(self) -> bool {
        self.0.is_null()
    }

    #[inline]
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

/// A child slot in a node (or the root): stored with release ordering
/// after what it points at is complete, loaded with acquire.
struct AtomicSlot(AtomicPtr<Head>);

impl AtomicSlot {
    const fn empty() -> AtomicSlot {
        AtomicSlot(AtomicPtr::new(std::ptr::null_mut()))
    }

    #[inline]
    fn load(&self) -> Slot {
        Slot(self.0.load(Ordering::Acquire))
    }

    #[inline]
    fn store(&self, s: Slot) {
        self.0.store(s.0, Ordering::Release);
    }

    /// The child, if the slot is not empty.
    #[inline]
    fn get(&self) -> Option<Slot> {
        let s = self.load();
        (!s.is_empty()).then_some(s)
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
enum Kind {
    N4,
    N16,
    N48,
    N256,
}

/// The part every inner node starts with: path compression data, kind,
/// child count and slots handed out. Only the counts change.
#[repr(C)]
struct Head {
    /// Any key of the subtree; its first `depth` bytes are the path.
    prefix: u64,
    /// The byte this node branches on (0 = most significant).
    depth: u8,
    kind: Kind,
    /// Children (the writer's count).
    n: AtomicU16,
    /// Slots handed out, in order (N4, N16 and N48; published with
    /// release ordering after the slot is filled).
    used: AtomicU8,
}

impl Head {
    fn new(prefix: u64, depth: u8, kind: Kind, n: usize) -> Self {
        Self {
            prefix,
            depth,
            kind,
            n: AtomicU16::new(n as u16),
            used: AtomicU8::new(0),
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.n.load(Ordering::Relaxed) as usize
    }

    /// One child more (writer only: not one atomic step).
    fn gained(&self) {
        self.n
            .store(self.n.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// One child fewer (writer only).
    fn lost(&self) {
        self.n
            .store(self.n.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
    }
}

/// Up to `N` children with their key bytes, in the order they came (N4,
/// N16). Slots below the head's `used` are published; a slot keeps its
/// byte for the node's life (emptied when its child goes, refilled if the
/// byte comes back). Byte `i` is byte `i % 8` (least significant first)
/// of word `i / 8` of `keys`, so a lookup compares eight at once.
#[repr(C)]
struct Small<const N: usize, const W: usize> {
    head: Head,
    keys: [AtomicU64; W],
    kids: [AtomicSlot; N],
}

type N4 = Small<4, 1>;
type N16 = Small<16, 2>;

/// Up to 48 children behind a 256-entry byte index (N48), changed in
/// place. Child slots are handed out once each, in order (the head's
/// `used`): the
/// node is rebuilt when they run out.
#[repr(C)]
struct Indexed {
    head: Head,
    present: [AtomicU64; 4],
    index: [AtomicU8; 256],
    kids: [AtomicSlot; 48],
}

/// A child slot per byte (N256), changed in place.
#[repr(C)]
struct Direct {
    head: Head,
    present: [AtomicU64; 4],
    kids: [AtomicSlot; 256],
}

/// What every inner node kind answers; children returned are never empty
/// slots. Reads are safe against a concurrent writer (see the module
/// docs): a child found belongs to the byte asked for.
trait Inner {
    fn head(&self) -> &Head;
    /// The slot of byte `b`'s child, if it has one.
    fn slot(&self, b: u8) -> Option<&AtomicSlot>;
    /// The child with the largest byte below `b`.
    fn below(&self, b: u8) -> Option<Slot>;
    /// Every (byte, child), ascending.
    fn children(&self) -> Vec<(u8, Slot)>;

    #[inline]
    fn get(&self, b: u8) -> Option<Slot> {
        self.slot(b)?.get()
    }

    #[inline]
    fn last(&self) -> Option<Slot> {
        self.get(255).or_else(|| self.below(255))
    }
}

#[inline]
fn byte_at(key: u64, depth: u8) -> u8 {
    (key >> (56 - 8 * depth as u32)) as u8
}

/// Mask of the first `depth` bytes.
#[inline]
fn prefix_mask(depth: u8) -> u64 {
    if depth == 0 {
        0
    } else {
        !0u64 << (64 - 8 * depth as u32)
    }
}

#[inline]
fn first_diff_byte(a: u64, b: u64) -> u8 {
    ((a ^ b).leading_zeros() / 8) as u8
}

/// The highest byte below `b` whose bit is set in a 256-bit presence map.
#[inline]
fn highest_below(present: &[AtomicU64; 4], b: u8) -> Option<u8> {
    let b = b as usize;
    let (word, bit) = (b / 64, b % 64);
    let masked = present[word].load(Ordering::Acquire) & ((1u64 << bit) - 1);
    if masked != 0 {
        return Some((word * 64 + 63 - masked.leading_zeros() as usize) as u8);
    }
    (0..word).rev().find_map(|w| {
        let bits = present[w].load(Ordering::Acquire);
        (bits != 0).then(|| (w * 64 + 63 - bits.leading_zeros() as usize) as u8)
    })
}

/// Sets or clears `b`'s bit (writer only: the load and store are not one
/// atomic step, which a single writer does not need).
fn set_bit(present: &[AtomicU64; 4], b: u8, on: bool) {
    let (w, bit) = (b as usize / 64, b % 64);
    let old = present[w].load(Ordering::Relaxed);
    let new = if on {
        old | 1 << bit
    } else {
        old & !(1 << bit)
    };
    present[w].store(new, Ordering::Release);
}

#[inline]
fn is_set(present: &[AtomicU64; 4], b: u8) -> bool {
    present[b as usize / 64].load(Ordering::Acquire) & (1 << (b % 64)) != 0
}

/// The child with the largest byte below `b` in a node with a presence
/// map, where `get` reads a byte's child: a byte whose child was removed
/// after its bit was read is passed over.
#[inline]
fn below_present(
    present: &[AtomicU64; 4],
    mut b: u8,
    get: impl Fn(u8) -> Option<Slot>,
) -> Option<Slot> {
    loop {
        let c = highest_below(present, b)?;
        if let Some(s) = get(c) {
            return Some(s);
        }
        b = c;
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;

impl<const N: usize, const W: usize> Small<N, W> {
    /// Published slots.
    #[inline]
    fn used(&self) -> usize {
        (self.head.used.load(Ordering::Acquire) as usize).min(N)
    }

    /// The byte of slot `i`, from `keys` loaded as words.
    #[inline]
    fn key_in(words: &[u64; W], i: usize) -> u8 {
        (words[i / 8] >> (8 * (i % 8))) as u8
    }

    #[inline]
    fn words(&self) -> [u64; W] {
        std::array::from_fn(|w| self.keys[w].load(Ordering::Relaxed))
    }

    #[inline]
    fn pos(&self, b: u8) -> Option<usize> {
        let used = self.used();
        for (w, word) in self.keys.iter().enumerate() {
            let from = 8 * w;
            if from >= used {
                break;
            }
            // Bytes equal to `b` become zero; the lowest zero byte sets the
            // high bit of its byte here (higher ones may be false hits,
            // which the lowest set bit is never).
            let x = word.load(Ordering::Relaxed) ^ (ONES * b as u64);
            let mut hits = x.wrapping_sub(ONES) & !x & (ONES << 7);
            if used - from < 8 {
                hits &= (1u64 << (8 * (used - from))) - 1;
            }
            if hits != 0 {
                return Some(from + hits.trailing_zeros() as usize / 8);
            }
        }
        None
    }

    /// The child with the largest byte below `b` (any byte for `None`).
    #[inline]
    fn max_below(&self, b: Option<u8>) -> Option<Slot> {
        let (used, words) = (self.used(), self.words());
        let mut best: Option<(u8, Slot)> = None;
        for i in 0..used {
            let k = Self::key_in(&words, i);
            if b.is_some_and(|b| k >= b) || best.is_some_and(|(bk, _)| bk >= k) {
                continue;
            }
            if let Some(c) = self.kids[i].get() {
                best = Some((k, c));
            }
        }
        best.map(|(_, c)| c)
    }

    /// Adds a child for a byte without one, in place; false if every slot
    /// is in use by another byte.
    fn add(&self, b: u8, c: Slot) -> bool {
        match self.pos(b) {
            Some(i) => self.kids[i].store(c),
            None => {
                let used = self.head.used.load(Ordering::Relaxed) as usize;
                if used >= N {
                    return false;
                }
                let word = &self.keys[used / 8];
                let shift = 8 * (used % 8);
                let old = word.load(Ordering::Relaxed) & !(0xff << shift);
                word.store(old | (b as u64) << shift, Ordering::Relaxed);
                self.kids[used].store(c);
                self.head.used.store(used as u8 + 1, Ordering::Release);
            }
        }
        self.head.gained();
        true
    }

    fn remove(&self, b: u8) {
        if let Some(i) = self.pos(b) {
            if !self.kids[i].load().is_empty() {
                self.kids[i].store(Slot::EMPTY);
                self.head.lost();
            }
        }
    }
}

impl<const N: usize, const W: usize> Inner for Small<N, W> {
    #[inline]
    fn head(&self) -> &Head {
        &self.head
    }
    #[inline]
    fn slot(&self, b: u8) -> Option<&AtomicSlot> {
        Some(&self.kids[self.pos(b)?])
    }
    #[inline]
    fn below(&self, b: u8) -> Option<Slot> {
        self.max_below(Some(b))
    }
    #[inline]
    fn last(&self) -> Option<Slot> {
        self.max_below(None)
    }
    fn children(&self) -> Vec<(u8, Slot)> {
        let words = self.words();
        let mut kids: Vec<(u8, Slot)> = (0..self.used())
            .filter_map(|i| Some((Self::key_in(&words, i), self.kids[i].get()?)))
            .collect();
        kids.sort_unstable_by_key(|&(k, _)| k);
        kids
    }
}

impl Inner for Indexed {
    #[inline]
    fn head(&self) -> &Head {
        &self.head
    }
    #[inline]
    fn slot(&self, b: u8) -> Option<&AtomicSlot> {
        match self.index[b as usize].load(Ordering::Acquire) {
            0 => None,
            s => self.kids.get(s as usize - 1),
        }
    }
    #[inline]
    fn below(&self, b: u8) -> Option<Slot> {
        below_present(&self.present, b, |c| self.get(c))
    }
    fn children(&self) -> Vec<(u8, Slot)> {
        (0..=255u8)
            .filter_map(|b| Some((b, self.get(b)?)))
            .collect()
    }
}

impl Inner for Direct {
    #[inline]
    fn head(&self) -> &Head {
        &self.head
    }
    #[inline]
    fn slot(&self, b: u8) -> Option<&AtomicSlot> {
        Some(&self.kids[b as usize])
    }
    #[inline]
    fn below(&self, b: u8) -> Option<Slot> {
        below_present(&self.present, b, |c| self.get(c))
    }
    fn children(&self) -> Vec<(u8, Slot)> {
        (0..=255u8)
            .filter_map(|b| Some((b, self.get(b)?)))
            .collect()
    }
}

impl Indexed {
    /// Adds a child for a byte not present, in place; false if every child
    /// slot has been handed out.
    fn add(&self, b: u8, c: Slot) -> bool {
        let used = self.head.used.load(Ordering::Relaxed);
        if used as usize >= self.kids.len() {
            return false;
        }
        self.kids[used as usize].store(c);
        self.head.used.store(used + 1, Ordering::Relaxed);
        self.index[b as usize].store(used + 1, Ordering::Release);
        set_bit(&self.present, b, true);
        self.head.gained();
        true
    }

    fn remove(&self, b: u8) {
        let s = self.index[b as usize].load(Ordering::Relaxed);
        if s == 0 {
            return;
        }
        set_bit(&self.present, b, false);
        self.index[b as usize].store(0, Ordering::Release);
        self.kids[s as usize - 1].store(Slot::EMPTY);
        self.head.lost();
    }
}

impl Direct {
    fn add(&self, b: u8, c: Slot) {
        self.kids[b as usize].store(c);
        set_bit(&self.present, b, true);
        self.head.gained();
    }

    fn remove(&self, b: u8) {
        if !is_set(&self.present, b) {
            return;
        }
        set_bit(&self.present, b, false);
        self.kids[b as usize].store(Slot::EMPTY);
        self.head.lost();
    }
}

/// The head of the inner node at `p`.
#[inline]
fn head<'a>(p: NonNull<Head>) -> &'a Head {
    // SAFETY: `p` came from a slot of the tree read under a guard (or with
    // the tree held exclusively), so it points at a live or retired but
    // not yet freed inner node, and every kind is `repr(C)` with its
    // `Head` first.
    unsafe { &*p.as_ptr() }
}

/// Evaluates `$f` with `$x` bound to the inner node at `$p` as its kind.
/// Callers hold the node alive (a guard, or the tree exclusively) for as
/// long as the reference lives.
macro_rules! node {
    ($p:expr, $x:ident => $f:expr) => {{
        let p: NonNull<Head> = $p;
        match head(p).kind {
            Kind::N4 => {
                // SAFETY: the kind says which node type `p` points at.
                let $x = unsafe { &*p.cast::<N4>().as_ptr() };
                $f
            }
            Kind::N16 => {
                // SAFETY: as above.
                let $x = unsafe { &*p.cast::<N16>().as_ptr() };
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
}

/// The N4 or N16 at `p`, as its kind, to `f`.
fn with_small<R>(p: NonNull<Head>, f4: impl FnOnce(&N4) -> R, f16: impl FnOnce(&N16) -> R) -> R {
    match head(p).kind {
        // SAFETY: the kind says `p` points at a `N4`, alive as in `head`.
        Kind::N4 => f4(unsafe { &*p.cast::<N4>().as_ptr() }),
        // SAFETY: as above, a `N16`.
        Kind::N16 => f16(unsafe { &*p.cast::<N16>().as_ptr() }),
        k => panic!("{k:?} is not an N4 or N16"),
    }
}

/// The N48 at `p`.
fn indexed<'a>(p: NonNull<Head>) -> &'a Indexed {
    assert_eq!(head(p).kind, Kind::N48);
    // SAFETY: the kind says `p` points at an `Indexed`, alive as in `head`.
    unsafe { &*p.cast::<Indexed>().as_ptr() }
}

/// The N256 at `p`.
fn direct<'a>(p: NonNull<Head>) -> &'a Direct {
    assert_eq!(head(p).kind, Kind::N256);
    // SAFETY: the kind says `p` points at a `Direct`, alive as in `head`.
    unsafe { &*p.cast::<Direct>().as_ptr() }
}

fn alloc<N>(node: N) -> NonNull<Head> {
    NonNull::from(Box::leak(Box::new(node))).cast()
}

/// Frees the inner node at `p` (not its children).
///
/// # Safety
/// `p` came from [`alloc`], no slot refers to it any more, and no reader
/// can still hold it.
unsafe fn free(p: NonNull<Head>) {
    // SAFETY: the kind names the type `alloc` boxed.
    unsafe {
        match head(p).kind {
            Kind::N4 => drop(Box::from_raw(p.cast::<N4>().as_ptr())),
            Kind::N16 => drop(Box::from_raw(p.cast::<N16>().as_ptr())),
            Kind::N48 => drop(Box::from_raw(p.cast::<Indexed>().as_ptr())),
            Kind::N256 => drop(Box::from_raw(p.cast::<Direct>().as_ptr())),
        }
    }
}

/// Frees the inner node at `p`, unlinked by the caller, once no reader
/// pinned now is left.
fn retire(p: NonNull<Head>, guard: &Guard) {
    let addr = p.as_ptr() as usize;
    // SAFETY: the writer unlinked `p` before this call, so only readers
    // pinned before it can hold `p`, and the epoch runs this after them.
    unsafe {
        guard.defer_unchecked(move || {
            if let Some(p) = NonNull::new(addr as *mut Head) {
                free(p);
            }
        })
    };
}

/// A new node holding `kids` (ascending by byte, at most 256), of the
/// smallest kind that fits them.
fn build(prefix: u64, depth: u8, kids: &[(u8, Slot)]) -> NonNull<Head> {
    let n = kids.len();
    fn small<const N: usize, const W: usize>(
        prefix: u64,
        depth: u8,
        kind: Kind,
        kids: &[(u8, Slot)],
    ) -> Small<N, W> {
        let node = Small::<N, W> {
            head: Head::new(prefix, depth, kind, 0),
            keys: [const { AtomicU64::new(0) }; W],
            kids: [const { AtomicSlot::empty() }; N],
        };
        for &(b, c) in kids {
            node.add(b, c);
        }
        node
    }
    if n <= 4 {
        alloc(small::<4, 1>(prefix, depth, Kind::N4, kids))
    } else if n <= 16 {
        alloc(small::<16, 2>(prefix, depth, Kind::N16, kids))
    } else if n <= 48 {
        let node = Indexed {
            head: Head::new(prefix, depth, Kind::N48, 0),
            present: [const { AtomicU64::new(0) }; 4],
            index: [const { AtomicU8::new(0) }; 256],
            kids: [const { AtomicSlot::empty() }; 48],
        };
        for &(b, c) in kids {
            node.add(b, c);
        }
        alloc(node)
    } else {
        let node = Direct {
            head: Head::new(prefix, depth, Kind::N256, 0),
            present: [const { AtomicU64::new(0) }; 4],
            kids: [const { AtomicSlot::empty() }; 256],
        };
        for &(b, c) in kids {
            node.add(b, c);
        }
        alloc(node)
    }
}

fn node_bytes(kind: Kind) -> usize {
    match kind {
        Kind::N4 => std::mem::size_of::<N4>(),
        Kind::N16 => std::mem::size_of::<N16>(),
        Kind::N48 => std::mem::size_of::<Indexed>(),
        Kind::N256 => std::mem::size_of::<Direct>(),
    }
}

/// Every inner node below and including `s`, children before parents.
fn for_each_inner(s: Slot, f: &mut impl FnMut(NonNull<Head>)) {
    if let Some(Child::Inner(p)) = s.child() {
        for (_, c) in node!(p, x => x.children()) {
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
        // going away (`&mut self`: no reader is left), so no slot is read
        // after its node is freed. Nodes unlinked earlier are the epoch's.
        for_each_inner(self.root.load(), &mut |p| unsafe { free(p) });
    }
}

impl Art {
    pub fn new() -> Self {
        Self {
            root: AtomicSlot::empty(),
            len: AtomicUsize::new(0),
            writer: Mutex::new(()),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// The value stored under `key`.
    pub fn get(&self, key: u64, key_of: impl Fn(usize) -> u64, _guard: &Guard) -> Option<usize> {
        let mut s = self.root.load();
        loop {
            match s.child()? {
                Child::Value(v) => return (key_of(v) == key).then_some(v),
                Child::Inner(p) => s = node!(p, x => x.get(byte_at(key, x.head().depth)))?,
            }
        }
    }

    /// The value with the largest key `<= key` (see the module docs for
    /// what a reader racing a writer may see).
    pub fn predecessor(
        &self,
        key: u64,
        key_of: impl Fn(usize) -> u64,
        _guard: &Guard,
    ) -> Option<usize> {
        pred(self.root.load(), key, &key_of)
    }

    /// Inserts `val` under `key` (`key_of(val)` must return `key` from now
    /// on) or replaces the value there; returns the previous value.
    ///
    /// # Panics
    /// If `val` is above [`MAX_VALUE`].
    pub fn insert(
        &self,
        key: u64,
        val: usize,
        key_of: impl Fn(usize) -> u64,
        guard: &Guard,
    ) -> Option<usize> {
        let _w = self.writer.lock();
        let old = insert(&self.root, key, val, &key_of, guard);
        if old.is_none() {
            self.len.fetch_add(1, Ordering::Relaxed);
        }
        old
    }

    /// Removes and returns the value under `key`.
    pub fn remove(&self, key: u64, key_of: impl Fn(usize) -> u64, guard: &Guard) -> Option<usize> {
        let _w = self.writer.lock();
        let old = match self.root.load().child()? {
            Child::Value(v) if key_of(v) == key => {
                self.root.store(Slot::EMPTY);
                v
            }
            Child::Value(_) => return None,
            Child::Inner(_) => remove(&self.root, key, &key_of, guard)?,
        };
        self.len.fetch_sub(1, Ordering::Relaxed);
        Some(old)
    }

    /// Heap bytes of the tree's inner nodes (those reachable now).
    pub fn heap_bytes(&self, _guard: &Guard) -> usize {
        let mut bytes = 0;
        for_each_inner(self.root.load(), &mut |p| bytes += node_bytes(head(p).kind));
        bytes
    }
}

#[inline]
fn max_of(mut s: Slot) -> Option<usize> {
    loop {
        match s.child()? {
            Child::Value(v) => return Some(v),
            Child::Inner(p) => s = node!(p, x => x.last())?,
        }
    }
}

#[inline]
fn pred(s: Slot, key: u64, key_of: &impl Fn(usize) -> u64) -> Option<usize> {
    let p = match s.child()? {
        Child::Value(v) => return (key_of(v) <= key).then_some(v),
        Child::Inner(p) => p,
    };
    let h = head(p);
    let mask = prefix_mask(h.depth);
    let (mine, theirs) = (key & mask, h.prefix & mask);
    if mine != theirs {
        // The whole subtree is on one side of `key`.
        return if theirs < mine { max_of(s) } else { None };
    }
    let b = byte_at(key, h.depth);
    let at = node!(p, x => x.get(b));
    if let Some(hit) = at.and_then(|c| pred(c, key, key_of)) {
        return Some(hit);
    }
    // Only when nothing at `b` is at or below `key`: the largest key left
    // of it.
    node!(p, x => x.below(b)).and_then(max_of)
}

/// Inserts under the slot `slot` (the writer's).
fn insert(
    slot: &AtomicSlot,
    key: u64,
    val: usize,
    key_of: &impl Fn(usize) -> u64,
    guard: &Guard,
) -> Option<usize> {
    let s = slot.load();
    let p = match s.child() {
        None => {
            slot.store(Slot::value(val));
            return None;
        }
        Some(Child::Value(v)) => {
            let other = key_of(v);
            if other == key {
                slot.store(Slot::value(val));
                return Some(v);
            }
            split_at(slot, s, other, key, val);
            return None;
        }
        Some(Child::Inner(p)) => p,
    };
    let h = head(p);
    if first_diff_byte(h.prefix, key) < h.depth {
        split_at(slot, s, h.prefix, key, val);
        return None;
    }
    let b = byte_at(key, h.depth);
    if let Some(c) = node!(p, x => x.slot(b)) {
        if !c.load().is_empty() {
            return insert(c, key, val, key_of, guard);
        }
    }
    let c = Slot::value(val);
    let in_place = match h.kind {
        Kind::N4 | Kind::N16 => with_small(p, |x| x.add(b, c), |x| x.add(b, c)),
        Kind::N48 => indexed(p).add(b, c),
        Kind::N256 => {
            direct(p).add(b, c);
            true
        }
    };
    if !in_place {
        let mut kids = node!(p, x => x.children());
        let i = kids.partition_point(|&(k, _)| k < b);
        kids.insert(i, (b, c));
        slot.store(Slot::inner(build(h.prefix, h.depth, &kids)));
        retire(p, guard);
    }
    None
}

/// Replaces `slot` (holding `old`, whose keys share `other`'s path) with a
/// new N4 at the first byte where `other` and `key` differ, holding both.
fn split_at(slot: &AtomicSlot, old: Slot, other: u64, key: u64, val: usize) {
    let depth = first_diff_byte(other, key);
    let (ob, kb) = (byte_at(other, depth), byte_at(key, depth));
    let new = Slot::value(val);
    let kids = if ob < kb {
        [(ob, old), (kb, new)]
    } else {
        [(kb, new), (ob, old)]
    };
    slot.store(Slot::inner(build(key, depth, &kids)));
}

/// Removes `key` from below the inner node in `slot` (the writer's).
fn remove(
    slot: &AtomicSlot,
    key: u64,
    key_of: &impl Fn(usize) -> u64,
    guard: &Guard,
) -> Option<usize> {
    let Some(Child::Inner(p)) = slot.load().child() else {
        return None;
    };
    let h = head(p);
    if first_diff_byte(h.prefix, key) < h.depth {
        return None;
    }
    let b = byte_at(key, h.depth);
    let child = node!(p, x => x.slot(b))?;
    let old = match child.load().child()? {
        Child::Value(v) if key_of(v) == key => v,
        Child::Value(_) => return None,
        // A deeper node loses the key; this one keeps its children.
        Child::Inner(_) => return remove(child, key, key_of, guard),
    };
    let n = h.len() - 1;
    let shrink = match h.kind {
        Kind::N4 => false,
        Kind::N16 => n <= 3,
        Kind::N48 => n <= 12,
        Kind::N256 => n <= 37,
    };
    if n <= 1 || shrink {
        let kids: Vec<(u8, Slot)> = node!(p, x => x.children())
            .into_iter()
            .filter(|&(k, _)| k != b)
            .collect();
        // Path compression: a one-child node is replaced by its child.
        let next = match kids.as_slice() {
            [] => Slot::EMPTY,
            [(_, only)] => *only,
            _ => Slot::inner(build(h.prefix, h.depth, &kids)),
        };
        slot.store(next);
        retire(p, guard);
    } else {
        match h.kind {
            Kind::N4 | Kind::N16 => with_small(p, |x| x.remove(b), |x| x.remove(b)),
            Kind::N48 => indexed(p).remove(b),
            Kind::N256 => direct(p).remove(b),
        }
    }
    Some(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_epoch as epoch;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn grows_and_shrinks_through_every_node_kind() {
        // Value k lives under key 3k.
        let key_of = |v: usize| v as u64 * 3;
        let art = Art::new();
        let g = &epoch::pin();
        for k in 0..300usize {
            art.insert(key_of(k), k, key_of, g);
        }
        assert_eq!(art.len(), 300);
        assert_eq!(art.predecessor(301, key_of, g), Some(100));
        assert_eq!(art.predecessor(0, key_of, g), Some(0));
        for k in 0..300usize {
            if k % 7 != 0 {
                assert_eq!(art.remove(key_of(k), key_of, g), Some(k));
            }
        }
        assert_eq!(art.predecessor(301, key_of, g), Some(98));
        assert_eq!(art.get(21, key_of, g), Some(7));
        assert_eq!(art.get(24, key_of, g), None);
    }

    #[test]
    fn a_slot_is_one_word_and_nodes_are_sized_by_it() {
        assert_eq!(std::mem::size_of::<Slot>(), 8);
        assert_eq!(std::mem::size_of::<Head>(), 16);
        assert_eq!(std::mem::size_of::<N4>(), 56);
        assert_eq!(std::mem::size_of::<Direct>(), 16 + 32 + 256 * 8);
        // One N256 node's worth of keys sharing seven bytes.
        let key_of = |v: usize| v as u64;
        let art = Art::new();
        let g = &epoch::pin();
        for k in 0..256usize {
            art.insert(k as u64, k, key_of, g);
        }
        assert_eq!(art.heap_bytes(g), std::mem::size_of::<Direct>());
        for k in 0..255usize {
            art.remove(k as u64, key_of, g);
        }
        assert_eq!(art.heap_bytes(g), 0);
        assert_eq!(art.get(255, key_of, g), Some(255));
    }

    #[test]
    fn a_small_node_finds_each_byte_in_its_slot_and_keeps_slots_to_their_bytes() {
        let v = |x: usize| Slot::value(x);
        let kids: Vec<(u8, Slot)> = [0u8, 1, 7, 8, 9, 100, 200, 255]
            .iter()
            .map(|&b| (b, v(b as usize)))
            .collect();
        let p = build(0, 7, &kids);
        assert_eq!(head(p).kind, Kind::N16);
        with_small(
            p,
            |_| unreachable!(),
            |x| {
                for &(b, c) in &kids {
                    assert_eq!(x.get(b), Some(c), "byte {b}");
                }
                for b in [2u8, 6, 10, 254] {
                    assert_eq!(x.get(b), None, "byte {b}");
                }
                assert_eq!(x.below(8), Some(v(7)));
                assert_eq!(x.below(0), None);
                assert_eq!(x.last(), Some(v(255)));
                // A removed byte keeps its slot; a new byte takes the next.
                x.remove(7);
                assert_eq!((x.get(7), x.below(8)), (None, Some(v(1))));
                assert!(x.add(3, v(3)));
                assert!(x.add(7, v(77)));
                assert_eq!(x.head.used.load(Ordering::Relaxed), 9);
                assert_eq!(
                    (x.get(7), x.get(3), x.below(7)),
                    (Some(v(77)), Some(v(3)), Some(v(3)))
                );
                for b in 10..17u8 {
                    assert!(x.add(b, v(b as usize)));
                }
                // Sixteen slots handed out: the next byte needs a new node.
                assert!(!x.add(20, v(20)));
                assert_eq!(x.children().len(), 16);
                assert!(x.children().windows(2).all(|w| w[0].0 < w[1].0));
            },
        );
        // SAFETY: freed once, never published.
        unsafe { free(p) };
    }

    /// Readers racing one writer: keys present throughout are always
    /// found, and a predecessor is never above the key asked for nor below
    /// the largest key present throughout that is not above it.
    #[test]
    fn readers_racing_a_writer_see_every_stable_key() {
        use rand::{Rng, SeedableRng};
        let (stable, churn, rounds, probes) = if cfg!(miri) {
            (24, 40, 2, 60)
        } else {
            (300, 600, 40, 40_000)
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        // Values index `keys`. Stable keys spread over several bytes; churn
        // keys land between them, beside them and anywhere.
        let mut keys: Vec<u64> = (0..stable as u64)
            .map(|i| i.wrapping_mul(0x0000_0101_0301_0701) + (i << 40))
            .collect();
        let mut seen: std::collections::HashSet<u64> = keys.iter().copied().collect();
        for i in 0..churn {
            let k = match i % 3 {
                0 => keys[i % stable] + 1 + rng.gen_range(0..5000),
                1 => keys[i % stable].wrapping_sub(1 + rng.gen_range(0..300)),
                _ => rng.gen(),
            };
            if seen.insert(k) {
                keys.push(k);
            }
        }
        let mut sorted_stable: Vec<u64> = keys[..stable].to_vec();
        sorted_stable.sort_unstable();
        let churn_vals: Vec<usize> = (stable..keys.len()).collect();
        let key_of = |v: usize| keys[v];
        let art = Art::new();
        for (v, &k) in keys[..stable].iter().enumerate() {
            art.insert(k, v, key_of, &epoch::pin());
        }
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut rng = rand::rngs::StdRng::seed_from_u64(11);
                let mut order = churn_vals.clone();
                for _ in 0..rounds {
                    for i in (1..order.len()).rev() {
                        order.swap(i, rng.gen_range(0..=i));
                    }
                    for &v in &order {
                        art.insert(keys[v], v, key_of, &epoch::pin());
                    }
                    for i in (1..order.len()).rev() {
                        order.swap(i, rng.gen_range(0..=i));
                    }
                    for &v in &order {
                        assert_eq!(art.remove(keys[v], key_of, &epoch::pin()), Some(v));
                    }
                }
                done.store(true, Ordering::Release);
            });
            for t in 0..2u64 {
                let (keys, sorted_stable, art, done) = (&keys, &sorted_stable, &art, &done);
                s.spawn(move || {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(100 + t);
                    let mut n = 0;
                    while n < probes || !done.load(Ordering::Acquire) {
                        n += 1;
                        let q: u64 = if n % 2 == 0 {
                            rng.gen()
                        } else {
                            keys[rng.gen_range(0..keys.len())].wrapping_add(rng.gen_range(0..3))
                        };
                        let g = epoch::pin();
                        let got = art.predecessor(q, key_of, &g).map(key_of);
                        let floor = sorted_stable.partition_point(|&k| k <= q);
                        if let Some(k) = got {
                            assert!(k <= q, "predecessor of {q:#x} is {k:#x}");
                        }
                        if floor > 0 {
                            let want = sorted_stable[floor - 1];
                            assert!(
                                got.is_some_and(|k| k >= want),
                                "predecessor of {q:#x}: {got:?}, stable {want:#x}"
                            );
                            let v = rng.gen_range(0..stable);
                            assert_eq!(art.get(keys[v], key_of, &g), Some(v));
                        }
                        if n > probes * 100 {
                            break;
                        }
                    }
                });
            }
        });
        assert_eq!(art.len(), stable);
        let g = &epoch::pin();
        for (i, &k) in sorted_stable.iter().enumerate() {
            assert_eq!(art.predecessor(k, key_of, g).map(key_of), Some(k));
            if i > 0 && k > sorted_stable[i - 1] + 1 {
                assert_eq!(
                    art.predecessor(k - 1, key_of, g).map(key_of),
                    Some(sorted_stable[i - 1])
                );
            }
        }
    }

    proptest! {
        #[test]
        fn matches_a_btreemap(ops in proptest::collection::vec((0u8..3, any::<u64>(), 0u64..2000), 1..400)) {
            // Values index `keys`, which records the key each was
            // inserted under.
            let mut keys: Vec<u64> = Vec::new();
            let art = Art::new();
            let g = &epoch::pin();
            let mut model = BTreeMap::new();
            for (op, wide, small) in ops {
                // Mix clustered and spread keys so prefixes are shared.
                let key = if wide % 2 == 0 { small } else { wide };
                match op {
                    0 => {
                        keys.push(key);
                        let v = keys.len() - 1;
                        let got = art.insert(key, v, |v| keys[v], g);
                        prop_assert_eq!(got, model.insert(key, v));
                    }
                    1 => prop_assert_eq!(art.remove(key, |v| keys[v], g), model.remove(&key)),
                    _ => {
                        let want = model.range(..=key).next_back().map(|(_, v)| *v);
                        prop_assert_eq!(art.predecessor(key, |v| keys[v], g), want);
                        prop_assert_eq!(art.get(key, |v| keys[v], g), model.get(&key).copied());
                    }
                }
                prop_assert_eq!(art.len(), model.len());
            }
            for probe in [0, 1, 999, u64::MAX] {
                let want = model.range(..=probe).next_back().map(|(_, v)| *v);
                prop_assert_eq!(art.predecessor(probe, |v| keys[v], g), want);
            }
        }
    }
}
