//! An adaptive radix tree over 8-byte keys: the inner nodes of the index,
//! mapping each leaf's anchor key to the leaf.
//!
//! Keys are compared as big-endian bytes, so byte order is numeric order.
//! Each inner node is one allocation of one of four kinds (4, 16, 48 or
//! 256 children) and grows or shrinks with its children; paths are
//! compressed (a node at byte depth `d` stores one key of its subtree, whose
//! first `d` bytes every key below shares), and a single key is stored
//! inline in its parent's child slot (lazy expansion), so a lookup touches
//! one allocation per level.
//!
//! The query the index needs is [`Art::predecessor`]: the largest key not
//! above a given one. Invariants: every inner node has at least two
//! children; children are ordered by key byte in every node kind.

/// An ART map from u64 to `T`.
pub struct Art<T> {
    root: Option<Node<T>>,
    len: usize,
}

/// A child slot: a key and its value inline, or an inner node.
enum Node<T> {
    Leaf { key: u64, val: T },
    N4(Box<Sorted<T, 4>>),
    N16(Box<Sorted<T, 16>>),
    N48(Box<Indexed<T>>),
    N256(Box<Direct<T>>),
}

/// Path compression data every inner node carries.
#[derive(Clone, Copy)]
struct Path {
    /// Any key of the subtree; its first `depth` bytes are the path.
    prefix: u64,
    /// The byte this node branches on (0 = most significant).
    depth: u8,
}

/// Up to `N` children with their key bytes in a sorted array (N4, N16).
struct Sorted<T, const N: usize> {
    path: Path,
    n: u8,
    keys: [u8; N],
    kids: [Option<Node<T>>; N],
}

/// Up to 48 children behind a 256-entry byte index (N48).
struct Indexed<T> {
    path: Path,
    n: u8,
    present: [u64; 4],
    index: [u8; 256],
    kids: [Option<Node<T>>; 48],
}

/// A child slot per byte (N256).
struct Direct<T> {
    path: Path,
    n: u16,
    present: [u64; 4],
    kids: [Option<Node<T>>; 256],
}

/// The operations every inner node kind provides.
trait Inner<T> {
    fn path(&self) -> Path;
    fn len(&self) -> usize;
    fn get(&self, b: u8) -> Option<&Node<T>>;
    fn get_mut(&mut self, b: u8) -> Option<&mut Node<T>>;
    /// The child with the largest key byte strictly below `b`.
    fn below(&self, b: u8) -> Option<&Node<T>>;
    fn last(&self) -> Option<&Node<T>>;
    /// Adds a child for a byte not present; false if the node is full.
    fn add(&mut self, b: u8, c: Node<T>) -> bool;
    fn remove(&mut self, b: u8) -> Option<Node<T>>;
    /// Every (byte, child), ascending, leaving the node empty.
    fn drain(&mut self) -> Vec<(u8, Node<T>)>;
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

impl<T, const N: usize> Sorted<T, N> {
    fn new(path: Path) -> Box<Self> {
        Box::new(Self {
            path,
            n: 0,
            keys: [0; N],
            kids: std::array::from_fn(|_| None),
        })
    }

    fn pos(&self, b: u8) -> Option<usize> {
        let keys = &self.keys[..self.n as usize];
        if N <= 4 {
            keys.iter().position(|&k| k == b)
        } else {
            keys.binary_search(&b).ok()
        }
    }
}

impl<T, const N: usize> Inner<T> for Sorted<T, N> {
    fn path(&self) -> Path {
        self.path
    }
    fn len(&self) -> usize {
        self.n as usize
    }
    fn get(&self, b: u8) -> Option<&Node<T>> {
        self.kids[self.pos(b)?].as_ref()
    }
    fn get_mut(&mut self, b: u8) -> Option<&mut Node<T>> {
        let i = self.pos(b)?;
        self.kids[i].as_mut()
    }
    fn below(&self, b: u8) -> Option<&Node<T>> {
        let i = self.keys[..self.n as usize].partition_point(|&k| k < b);
        self.kids[i.checked_sub(1)?].as_ref()
    }
    fn last(&self) -> Option<&Node<T>> {
        self.kids[(self.n as usize).checked_sub(1)?].as_ref()
    }
    fn add(&mut self, b: u8, c: Node<T>) -> bool {
        let len = self.n as usize;
        if len == N {
            return false;
        }
        let i = self.keys[..len].partition_point(|&k| k < b);
        self.keys.copy_within(i..len, i + 1);
        self.kids[i..=len].rotate_right(1);
        self.keys[i] = b;
        self.kids[i] = Some(c);
        self.n += 1;
        true
    }
    fn remove(&mut self, b: u8) -> Option<Node<T>> {
        let len = self.n as usize;
        let i = self.pos(b)?;
        let c = self.kids[i].take();
        self.keys.copy_within(i + 1..len, i);
        self.kids[i..len].rotate_left(1);
        self.n -= 1;
        c
    }
    fn drain(&mut self) -> Vec<(u8, Node<T>)> {
        let len = self.n as usize;
        self.n = 0;
        (0..len)
            .filter_map(|i| Some((self.keys[i], self.kids[i].take()?)))
            .collect()
    }
}

impl<T> Inner<T> for Indexed<T> {
    fn path(&self) -> Path {
        self.path
    }
    fn len(&self) -> usize {
        self.n as usize
    }
    fn get(&self, b: u8) -> Option<&Node<T>> {
        match self.index[b as usize] {
            0 => None,
            s => self.kids[s as usize - 1].as_ref(),
        }
    }
    fn get_mut(&mut self, b: u8) -> Option<&mut Node<T>> {
        match self.index[b as usize] {
            0 => None,
            s => self.kids[s as usize - 1].as_mut(),
        }
    }
    fn below(&self, b: u8) -> Option<&Node<T>> {
        self.get(highest_below(&self.present, b)?)
    }
    fn last(&self) -> Option<&Node<T>> {
        self.get(255).or_else(|| self.below(255))
    }
    fn add(&mut self, b: u8, c: Node<T>) -> bool {
        let Some(slot) = self.kids.iter().position(Option::is_none) else {
            return false;
        };
        self.kids[slot] = Some(c);
        self.index[b as usize] = slot as u8 + 1;
        set_bit(&mut self.present, b, true);
        self.n += 1;
        true
    }
    fn remove(&mut self, b: u8) -> Option<Node<T>> {
        let s = std::mem::replace(&mut self.index[b as usize], 0);
        if s == 0 {
            return None;
        }
        set_bit(&mut self.present, b, false);
        self.n -= 1;
        self.kids[s as usize - 1].take()
    }
    fn drain(&mut self) -> Vec<(u8, Node<T>)> {
        (0..=255u8)
            .filter_map(|b| Some((b, self.remove(b)?)))
            .collect()
    }
}

impl<T> Inner<T> for Direct<T> {
    fn path(&self) -> Path {
        self.path
    }
    fn len(&self) -> usize {
        self.n as usize
    }
    fn get(&self, b: u8) -> Option<&Node<T>> {
        self.kids[b as usize].as_ref()
    }
    fn get_mut(&mut self, b: u8) -> Option<&mut Node<T>> {
        self.kids[b as usize].as_mut()
    }
    fn below(&self, b: u8) -> Option<&Node<T>> {
        self.get(highest_below(&self.present, b)?)
    }
    fn last(&self) -> Option<&Node<T>> {
        self.get(255).or_else(|| self.below(255))
    }
    fn add(&mut self, b: u8, c: Node<T>) -> bool {
        self.kids[b as usize] = Some(c);
        set_bit(&mut self.present, b, true);
        self.n += 1;
        true
    }
    fn remove(&mut self, b: u8) -> Option<Node<T>> {
        let c = self.kids[b as usize].take();
        if c.is_some() {
            set_bit(&mut self.present, b, false);
            self.n -= 1;
        }
        c
    }
    fn drain(&mut self) -> Vec<(u8, Node<T>)> {
        (0..=255u8)
            .filter_map(|b| Some((b, self.remove(b)?)))
            .collect()
    }
}

/// Calls `$f` on the inner node behind `$node`, or evaluates `$leaf`.
macro_rules! inner {
    ($node:expr, $n:ident => $f:expr, $leaf:pat => $l:expr) => {
        match $node {
            Node::N4($n) => $f,
            Node::N16($n) => $f,
            Node::N48($n) => $f,
            Node::N256($n) => $f,
            $leaf => $l,
        }
    };
}

impl<T> Node<T> {
    /// An empty inner node able to hold `want` children.
    fn with_room(path: Path, want: usize) -> Node<T> {
        if want <= 4 {
            Node::N4(Sorted::new(path))
        } else if want <= 16 {
            Node::N16(Sorted::new(path))
        } else if want <= 48 {
            Node::N48(Box::new(Indexed {
                path,
                n: 0,
                present: [0; 4],
                index: [0; 256],
                kids: std::array::from_fn(|_| None),
            }))
        } else {
            Node::N256(Box::new(Direct {
                path,
                n: 0,
                present: [0; 4],
                kids: std::array::from_fn(|_| None),
            }))
        }
    }

    /// Moves this inner node's children into a node of the kind that fits
    /// `len + extra` of them.
    fn resize(&mut self, extra: usize) {
        let (path, kids) = inner!(self, x => (x.path(), x.drain()), Node::Leaf { .. } => return);
        let mut next = Node::with_room(path, kids.len() + extra);
        for (b, c) in kids {
            inner!(&mut next, x => { x.add(b, c); }, Node::Leaf { .. } => {});
        }
        *self = next;
    }

    fn heap_bytes(&self) -> usize {
        let own = match self {
            Node::Leaf { .. } => return 0,
            Node::N4(_) => std::mem::size_of::<Sorted<T, 4>>(),
            Node::N16(_) => std::mem::size_of::<Sorted<T, 16>>(),
            Node::N48(_) => std::mem::size_of::<Indexed<T>>(),
            Node::N256(_) => std::mem::size_of::<Direct<T>>(),
        };
        let kids: usize = inner!(self, x => (0..=255u8).filter_map(|b| x.get(b)).map(Node::heap_bytes).sum(), Node::Leaf { .. } => 0);
        own + kids
    }
}

impl<T: Copy> Default for Art<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy> Art<T> {
    pub fn new() -> Self {
        Self { root: None, len: 0 }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, key: u64) -> Option<T> {
        let mut node = self.root.as_ref()?;
        loop {
            node = inner!(node, x => x.get(byte_at(key, x.path().depth))?, Node::Leaf { key: k, val } => return (*k == key).then_some(*val));
        }
    }

    /// The entry with the largest key `<= key`.
    pub fn predecessor(&self, key: u64) -> Option<(u64, T)> {
        pred(self.root.as_ref()?, key)
    }

    /// Inserts or replaces; returns the previous value.
    pub fn insert(&mut self, key: u64, val: T) -> Option<T> {
        let Some(root) = self.root.as_mut() else {
            self.root = Some(Node::Leaf { key, val });
            self.len += 1;
            return None;
        };
        let old = insert(root, key, val);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    pub fn remove(&mut self, key: u64) -> Option<T> {
        let root = self.root.as_mut()?;
        if let Node::Leaf { key: k, val } = *root {
            if k != key {
                return None;
            }
            self.root = None;
            self.len -= 1;
            return Some(val);
        }
        let old = remove(root, key);
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    /// Heap bytes of the tree's inner nodes.
    pub fn heap_bytes(&self) -> usize {
        self.root.as_ref().map_or(0, Node::heap_bytes)
    }
}

fn max_of<T: Copy>(mut node: &Node<T>) -> Option<(u64, T)> {
    loop {
        node = inner!(node, x => x.last()?, Node::Leaf { key, val } => return Some((*key, *val)));
    }
}

fn pred<T: Copy>(node: &Node<T>, key: u64) -> Option<(u64, T)> {
    let path = inner!(node, x => x.path(), Node::Leaf { key: k, val } => return (*k <= key).then_some((*k, *val)));
    let Path { prefix, depth } = path;
    let mask = prefix_mask(depth);
    let (mine, theirs) = (key & mask, prefix & mask);
    if mine != theirs {
        // The whole subtree is on one side of `key`.
        return if theirs < mine { max_of(node) } else { None };
    }
    let b = byte_at(key, depth);
    match node {
        Node::N4(x) => pred_sorted(x, b, key),
        Node::N16(x) => pred_sorted(x, b, key),
        _ => inner!(node, x => {
            if let Some(hit) = x.get(b).and_then(|c| pred(c, key)) {
                return Some(hit);
            }
            x.below(b).and_then(|c| max_of(c))
        }, Node::Leaf { .. } => None),
    }
}

/// [`pred`] below a sorted node: one search finds both the child for `b`
/// and the one before it.
fn pred_sorted<T: Copy, const N: usize>(x: &Sorted<T, N>, b: u8, key: u64) -> Option<(u64, T)> {
    let n = x.n as usize;
    let i = x.keys[..n].partition_point(|&k| k < b);
    if i < n && x.keys[i] == b {
        if let Some(hit) = x.kids[i].as_ref().and_then(|c| pred(c, key)) {
            return Some(hit);
        }
    }
    x.kids[i.checked_sub(1)?].as_ref().and_then(|c| max_of(c))
}

fn insert<T: Copy>(slot: &mut Node<T>, key: u64, val: T) -> Option<T> {
    let path = match slot {
        Node::Leaf { key: k, val: v } if *k == key => return Some(std::mem::replace(v, val)),
        Node::Leaf { key: k, .. } => {
            let other = *k;
            split_at(slot, other, key, val);
            return None;
        }
        Node::N4(x) => x.path(),
        Node::N16(x) => x.path(),
        Node::N48(x) => x.path(),
        Node::N256(x) => x.path(),
    };
    if first_diff_byte(path.prefix, key) < path.depth {
        split_at(slot, path.prefix, key, val);
        return None;
    }
    let b = byte_at(key, path.depth);
    let child = inner!(slot, x => x.get_mut(b), Node::Leaf { .. } => None);
    if let Some(c) = child {
        return insert(c, key, val);
    }
    let added = inner!(slot, x => x.add(b, Node::Leaf { key, val }), Node::Leaf { .. } => true);
    if !added {
        slot.resize(1);
        inner!(slot, x => { x.add(b, Node::Leaf { key, val }); }, Node::Leaf { .. } => {});
    }
    None
}

/// Replaces `slot` (whose keys share `other`'s path) with a new N4 at the
/// first byte where `other` and `key` differ, holding both.
fn split_at<T: Copy>(slot: &mut Node<T>, other: u64, key: u64, val: T) {
    let depth = first_diff_byte(other, key);
    let mut n4 = Sorted::<T, 4>::new(Path { prefix: key, depth });
    let old = std::mem::replace(slot, Node::Leaf { key, val });
    n4.add(byte_at(other, depth), old);
    n4.add(byte_at(key, depth), Node::Leaf { key, val });
    *slot = Node::N4(n4);
}

fn remove<T: Copy>(slot: &mut Node<T>, key: u64) -> Option<T> {
    let path = inner!(&*slot, x => x.path(), Node::Leaf { .. } => return None);
    if first_diff_byte(path.prefix, key) < path.depth {
        return None;
    }
    let b = byte_at(key, path.depth);
    let child = inner!(slot, x => x.get_mut(b), Node::Leaf { .. } => None)?;
    let old = match child {
        Node::Leaf { key: k, val } if *k == key => {
            let v = *val;
            inner!(slot, x => { x.remove(b); }, Node::Leaf { .. } => {});
            Some(v)
        }
        Node::Leaf { .. } => None,
        _ => remove(child, key),
    }?;
    let (len, shrink) = match slot {
        Node::N4(x) => (x.len(), false),
        Node::N16(x) => (x.len(), x.len() <= 3),
        Node::N48(x) => (x.len(), x.len() <= 12),
        Node::N256(x) => (x.len(), x.len() <= 37),
        Node::Leaf { .. } => (2, false),
    };
    if len == 1 {
        // Path compression: a one-child inner node is replaced by its child.
        let mut rest = inner!(slot, x => x.drain(), Node::Leaf { .. } => Vec::new());
        if let Some((_, only)) = rest.pop() {
            *slot = only;
        }
    } else if shrink {
        slot.resize(0);
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
        let mut art = Art::new();
        for k in 0..300u64 {
            art.insert(k * 3, k);
        }
        assert_eq!(art.len(), 300);
        assert_eq!(art.predecessor(301), Some((300, 100)));
        assert_eq!(art.predecessor(0), Some((0, 0)));
        for k in 0..300u64 {
            if k % 7 != 0 {
                assert_eq!(art.remove(k * 3), Some(k));
            }
        }
        assert_eq!(art.predecessor(301), Some((294, 98)));
        assert_eq!(art.get(21), Some(7));
        assert_eq!(art.get(24), None);
    }

    proptest! {
        #[test]
        fn matches_a_btreemap(ops in proptest::collection::vec((0u8..3, any::<u64>(), 0u64..2000), 1..400)) {
            let mut art = Art::new();
            let mut model = BTreeMap::new();
            for (op, wide, small) in ops {
                // Mix clustered and spread keys so prefixes are shared.
                let key = if wide % 2 == 0 { small } else { wide };
                match op {
                    0 => prop_assert_eq!(art.insert(key, small), model.insert(key, small)),
                    1 => prop_assert_eq!(art.remove(key), model.remove(&key)),
                    _ => {
                        let want = model.range(..=key).next_back().map(|(k, v)| (*k, *v));
                        prop_assert_eq!(art.predecessor(key), want);
                    }
                }
                prop_assert_eq!(art.len(), model.len());
            }
            for probe in [0, 1, 999, u64::MAX] {
                let want = model.range(..=probe).next_back().map(|(k, v)| (*k, *v));
                prop_assert_eq!(art.predecessor(probe), want);
            }
        }
    }
}
