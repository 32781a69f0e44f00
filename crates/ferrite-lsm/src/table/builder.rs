//! Writes one table into memory: data blocks, then the meta region.
//!
//! Entries must come in strictly ascending key order (one version per key;
//! the memtable and compaction keep only the newest). The finished table is
//! whole pages in one aligned buffer, written to its extent in one
//! sequential write by the caller. Blocks are built as whole pages and, if
//! the builder compresses, packed into frames once the table is complete
//! (`packing`): the index never sees the compressed layout.
//!
//! A builder is reused table after table (a compaction cuts many): its
//! working arrays keep their memory, so a table's build touches pages that
//! are already mapped instead of growing fresh arrays by doubling, which
//! on a busy allocator costs more than the build itself.

use std::time::Instant;

use ferrite_io::AlignedBuf;
use ferrite_learned::{BoundedModel, FitKind};

use super::block::{entries_per_page, entry_len, BlockBuilder, PAGE};
use super::bloom::Bloom;
use super::footer::{Footer, Properties, FOOTER_LEN};
use super::index::{shortest_separator, BlockMap, Index, LearnedIndex, SparseIndex};
use super::packing::{Compression, Packer, Packing};
use super::projected_keys::ProjectedKeys;
use super::thresholds::Thresholds;
use crate::options::IndexKind;

/// A finished table, ready to be written.
pub struct BuiltTable {
    pub bytes: AlignedBuf,
    pub entries: u64,
    #[cfg_attr(
        not(feature = "bench-internals"),
        allow(dead_code, reason = "the harness reads it through `internals`")
    )]
    pub index_bytes: usize,
    pub training_micros: u64,
    /// A model was fitted but took more bytes than the sparse index, which
    /// the table got instead.
    pub sparse_fallback: bool,
}

impl BuiltTable {
    pub fn pages(&self) -> u64 {
        (self.bytes.len() / PAGE) as u64
    }
}

pub struct TableBuilder {
    kind: IndexKind,
    /// Keep the sparse index where the model would be larger.
    smaller_index: bool,
    bloom_bits: usize,
    training_threads: usize,
    compression: Compression,
    packer: Packer,
    /// The compressed data region being written.
    packed: Vec<u8>,
    data: Vec<u8>,
    block: BlockBuilder,
    /// Per finished block: its first ordinal, first page, last key.
    block_first: Vec<u32>,
    block_page: Vec<u32>,
    separators: Vec<Vec<u8>>,
    /// What the sparse index of the blocks so far encodes to.
    sparse_bytes: usize,
    last_key: Vec<u8>,
    first_key: Vec<u8>,
    /// The largest sequence number of the entries (see [`TableBuilder::note_seq`]).
    max_seq: u64,
    /// Every key's model input (the model is fitted at `finish`).
    projected: ProjectedKeys,
    /// The points the model is fitted on when some model inputs repeat:
    /// one per distinct input.
    point_xs: Vec<u64>,
    point_pos: Vec<u64>,
    /// `0, 1, 2, ...`: the points' positions when no input repeats (only
    /// ever grown, so a table's build writes none of it).
    ordinals: Vec<u64>,
    /// The meta region (filter, index, properties, footer) being encoded.
    region: Vec<u8>,
    hashes: Vec<u64>,
    entries: u64,
    deletes: u32,
    /// The size every entry so far has had, while they all had one.
    uniform: Option<usize>,
    mixed: bool,
}

impl TableBuilder {
    pub fn new(kind: IndexKind, bloom_bits: usize, training_threads: usize) -> Self {
        Self {
            kind,
            smaller_index: true,
            bloom_bits,
            training_threads,
            compression: Compression::None,
            packer: Packer::default(),
            packed: Vec::new(),
            data: Vec::new(),
            block: BlockBuilder::default(),
            block_first: Vec::new(),
            block_page: Vec::new(),
            separators: Vec::new(),
            sparse_bytes: SPARSE_HEADER,
            last_key: Vec::new(),
            first_key: Vec::new(),
            max_seq: 0,
            projected: ProjectedKeys::default(),
            point_xs: Vec::new(),
            point_pos: Vec::new(),
            ordinals: Vec::new(),
            region: Vec::new(),
            hashes: Vec::new(),
            entries: 0,
            deletes: 0,
            uniform: None,
            mixed: false,
        }
    }

    /// With `false`, a learned table keeps its model even where the sparse
    /// index would be smaller (`LsmOptions::smaller_index`).
    pub fn smaller_index(mut self, on: bool) -> Self {
        self.smaller_index = on;
        self
    }

    /// How the table's data blocks are stored (none by default).
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    #[cfg_attr(
        not(feature = "bench-internals"),
        allow(dead_code, reason = "the harness reads it through `internals`")
    )]
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Bytes of data added so far, the open block's as filled (for
    /// cutting output tables): counting it as a whole page would make a
    /// one-page target cut after every entry.
    pub fn estimated_bytes(&self) -> usize {
        self.data.len() + self.block.bytes()
    }

    #[cfg_attr(
        not(feature = "bench-internals"),
        allow(dead_code, reason = "the harness reads it through `internals`")
    )]
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Adds the next entry; `key` must be greater than every earlier key.
    /// Records that the table holds entries written at up to `seq` (the
    /// table's `max_seq` is the largest noted; range deletes are judged
    /// against it).
    pub fn note_seq(&mut self, seq: u64) {
        self.max_seq = self.max_seq.max(seq);
    }

    pub fn add(&mut self, key: &[u8], value: Option<&[u8]>) {
        debug_assert!(self.entries == 0 || key > self.last_key.as_slice());
        let len = entry_len(key, value);
        if !self.block.is_empty() && !self.block.fits(len) {
            self.finish_block(Some(key));
        }
        if self.block.is_empty() {
            self.block_first.push(self.entries as u32);
            self.block_page.push((self.data.len() / PAGE) as u32);
        }
        self.block.add(key, value);
        match self.uniform {
            None if self.entries == 0 => self.uniform = Some(len),
            Some(u) if u != len => self.mixed = true,
            _ => {}
        }
        if self.entries == 0 {
            self.first_key = key.to_vec();
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        if self.kind != IndexKind::Sparse {
            self.projected.push(&self.first_key, key);
        }
        self.hashes.push(Bloom::hash(key));
        self.entries += 1;
        if value.is_none() {
            self.deletes += 1;
        }
    }

    fn finish_block(&mut self, next: Option<&[u8]>) {
        // A model locates blocks by ordinal, but the separators are kept
        // under a model too (unless every model is kept): a table whose
        // model does not pay for itself gets the sparse index instead.
        if self.kind == IndexKind::Sparse || self.smaller_index {
            let separator = match next {
                Some(n) => shortest_separator(&self.last_key, n),
                None => self.last_key.clone(),
            };
            self.sparse_bytes += SPARSE_PER_BLOCK + separator.len();
            self.separators.push(separator);
        }
        self.block.finish_into(&mut self.data);
    }

    /// Finishes the table and empties the builder for the next one.
    /// Panics never; an empty builder makes no table.
    pub fn finish(&mut self) -> Option<BuiltTable> {
        let built = self.build();
        self.clear();
        built
    }

    fn clear(&mut self) {
        self.data.clear();
        self.block_first.clear();
        self.block_page.clear();
        self.separators.clear();
        self.sparse_bytes = SPARSE_HEADER;
        self.last_key.clear();
        self.first_key.clear();
        self.projected.clear();
        self.hashes.clear();
        self.entries = 0;
        self.deletes = 0;
        self.max_seq = 0;
        self.uniform = None;
        self.mixed = false;
    }

    fn build(&mut self) -> Option<BuiltTable> {
        if self.entries == 0 {
            return None;
        }
        self.finish_block(None);
        let data_pages = (self.data.len() / PAGE) as u32;
        let packing = self.pack();
        let started = Instant::now();
        let learned = match self.kind {
            IndexKind::Sparse => None,
            IndexKind::Learned { fit, eps } => Some((fit, eps, false)),
            IndexKind::Bourbon { eps } => Some((FitKind::Piecewise, eps, true)),
        };
        // The learned index was given up before its fit.
        let mut blind = false;
        let built = match learned {
            None => None,
            Some((fit, eps, whole_block)) => {
                let (projection, every) = self.projected.finish(&self.first_key);
                // One point per distinct projection: its first ordinal.
                // When every projection is distinct (the usual case) the
                // points are the projections and the ordinals as they are.
                let n = every.len();
                let distinct = every.windows(2).all(|w| w[0] < w[1]);
                let (xs, pos): (&[u64], &[u64]) = if distinct {
                    let have = self.ordinals.len();
                    self.ordinals.extend(have as u64..n.max(have) as u64);
                    (every, &self.ordinals[..n])
                } else {
                    let (xs, pos) = (&mut self.point_xs, &mut self.point_pos);
                    xs.clear();
                    pos.clear();
                    for (i, &x) in every.iter().enumerate() {
                        if xs.last().is_none_or(|&l| l < x) {
                            xs.push(x);
                            pos.push(i as u64);
                        }
                    }
                    (xs, pos)
                };
                // Distinct model inputs among the keys.
                let points = xs.len();
                // Keys the projection cannot tell apart get the sparse
                // index (see `blind_projection`), decided before any fit:
                // a model over them has windows spanning the table, and
                // its thresholds would walk every block for every key.
                blind = self.smaller_index && blind_projection(points, self.entries);
                if blind {
                    None
                } else {
                    // A window wider than a quarter of a block would send many
                    // lookups to a neighbouring block; ε is capped there.
                    let per_block = self.entries as f64 / self.block_first.len().max(1) as f64;
                    let eps = eps.min((per_block / 4.0).max(1.0));
                    let model = BoundedModel::fit_parallel(
                        xs,
                        pos,
                        self.entries,
                        fit,
                        eps,
                        self.training_threads,
                    );
                    let fixed = self.uniform.filter(|_| !self.mixed).and_then(|len| {
                        let per = entries_per_page(len) as u32;
                        let all_full = self.block_first.iter().enumerate().all(|(b, &f)| {
                            f == b as u32 * per && self.block_page.get(b) == Some(&(b as u32))
                        });
                        (per > 0 && all_full).then_some(per)
                    });
                    let map = match fixed {
                        Some(per_page) => BlockMap::Fixed {
                            per_page,
                            entries: self.entries,
                        },
                        None => BlockMap::Variable {
                            first: std::mem::take(&mut self.block_first),
                            page: std::mem::take(&mut self.block_page),
                        },
                    };
                    let mut learned = LearnedIndex {
                        map,
                        projection,
                        model,
                        whole_block,
                        thresholds: None,
                    };
                    let blocks = learned.block_count(data_pages);
                    learned.thresholds = Thresholds::fit(&learned, every, distinct, blocks);
                    Some(Index::Learned(learned))
                }
            }
        };
        let mut index = match built {
            Some(index) => index,
            None => self.sparse_index(),
        };
        let training_micros = if learned.is_some() {
            started.elapsed().as_micros() as u64
        } else {
            0
        };
        // A learned index never costs more than the sparse one it replaces:
        // on keys a model fits badly its segments, block map and
        // thresholds can outgrow the separators. Nor does it serve keys its
        // projection cannot tell apart (see `blind_projection`). A builder
        // told to keep every model (`smaller_index(false)`, for the
        // experiments that measure models) keeps it regardless.
        let sparse_fallback = blind
            || (self.smaller_index
                && index.is_learned()
                && index.encoded_len() > self.sparse_bytes);
        if sparse_fallback && index.is_learned() {
            if let Index::Learned(LearnedIndex {
                map: BlockMap::Variable { page, .. },
                ..
            }) = &mut index
            {
                self.block_page = std::mem::take(page);
            }
            index = self.sparse_index();
        }
        let bloom = Bloom::build(&self.hashes, self.bloom_bits);
        let props = Properties {
            smallest: self.first_key.clone(),
            largest: self.last_key.clone(),
            training_micros,
            max_seq: self.max_seq,
            packing,
        };
        let region = &mut self.region;
        region.clear();
        bloom.encode(region);
        let filter_len = region.len() as u32;
        index.encode(region);
        let index_len = region.len() as u32 - filter_len;
        props.encode(region);
        let props_len = region.len() as u32 - filter_len - index_len;
        let meta_pages = (region.len() + FOOTER_LEN).div_ceil(PAGE);
        region.resize(meta_pages * PAGE - FOOTER_LEN, 0);
        let data: &[u8] = match &props.packing {
            Some(_) => &self.packed,
            None => &self.data,
        };
        Footer {
            data_pages: (data.len() / PAGE) as u32,
            meta_pages: meta_pages as u32,
            entries: self.entries,
            filter_len,
            index_len,
            props_len,
            index_kind: index.kind_byte(),
            deletes: self.deletes,
        }
        .encode_into(region);
        let mut bytes = AlignedBuf::zeroed(data.len() + region.len());
        let (d, meta) = bytes.split_at_mut(data.len());
        d.copy_from_slice(data);
        meta.copy_from_slice(region);
        Some(BuiltTable {
            bytes,
            entries: self.entries,
            index_bytes: index_len as usize,
            training_micros,
            sparse_fallback,
        })
    }

    /// Compresses the finished blocks into `packed`, or `None` to store
    /// them as they are: uncompressed by choice, or packing would save no
    /// page, or zstd failed (the table is then written uncompressed, which
    /// costs bytes, never data).
    fn pack(&mut self) -> Option<Packing> {
        if self.compression == Compression::None {
            return None;
        }
        let starts = &self.block_page;
        match self
            .packer
            .pack(self.compression, &self.data, starts, &mut self.packed)
        {
            Ok(p) if self.packed.len() < self.data.len() => Some(p),
            Ok(_) => None,
            Err(e) => {
                log::warn!("table compression failed ({e}); writing the table uncompressed");
                None
            }
        }
    }

    /// The sparse index of the finished blocks (taking their separators
    /// and pages).
    fn sparse_index(&mut self) -> Index {
        Index::Sparse(SparseIndex {
            separators: std::mem::take(&mut self.separators),
            page: std::mem::take(&mut self.block_page),
        })
    }
}

/// Encoded sparse index: a `u32` block count, then per block a `u32` page,
/// a `u16` separator length and the separator (see `Index::encode`).
const SPARSE_HEADER: usize = 4;
const SPARSE_PER_BLOCK: usize = 6;

/// Whether a table's projection maps too many keys to the same model
/// input for a learned index to find them: fewer than one distinct input
/// per four keys. That happens when keys share bytes well past the
/// table's common prefix: a table holding the server's few system
/// records (`\x13...`) beside a million `\x00key:000000nnnnnn` keys has
/// no common prefix, and the eight bytes a projection reads are the same
/// for every user key. Every lookup would then start from one prediction
/// for the whole table and gallop through its blocks; a sparse index
/// finds the block with one binary search.
fn blind_projection(points: usize, entries: u64) -> bool {
    (points as u64).saturating_mul(4) < entries
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::footer::Footer;
    use crate::table::index::KIND_SPARSE;
    use proptest::prelude::*;

    /// The index a finished table carries, decoded from its bytes.
    fn index_of(t: &BuiltTable) -> (Footer, Index) {
        let footer = Footer::decode(&t.bytes[t.bytes.len() - FOOTER_LEN..]).unwrap();
        let meta = footer.data_pages as usize * PAGE;
        let at = meta + footer.filter_len as usize;
        let index = Index::decode(
            footer.index_kind,
            &t.bytes[at..at + footer.index_len as usize],
            footer.data_pages,
        )
        .unwrap();
        (footer, index)
    }

    fn built(kind: IndexKind, keys: &[Vec<u8>], value_len: usize) -> BuiltTable {
        let mut b = TableBuilder::new(kind, 10, 1);
        for k in keys {
            b.add(k, Some(&vec![7; value_len]));
        }
        b.finish().unwrap()
    }

    #[test]
    fn the_size_estimate_counts_the_open_block_as_filled() {
        let mut b = TableBuilder::new(IndexKind::Sparse, 10, 1);
        assert_eq!(b.estimated_bytes(), 0);
        b.add(b"k0", Some(b"v"));
        let one = b.estimated_bytes();
        assert!(one > 0 && one < 64, "one small entry is {one} bytes");
        for i in 1..1000u32 {
            b.add(format!("k{i:04}").as_bytes(), Some(b"v"));
        }
        // Past the first page: whole pages behind, the open one as filled.
        let many = b.estimated_bytes();
        assert!(many > PAGE && many < 1000 * 32, "{many}");
        assert!(many >= b.data.len() && many < b.data.len() + PAGE);
    }

    /// Keys no line fits: runs of consecutive integers, each as long as
    /// about two model windows, far apart at random distances, so the model
    /// needs a segment or more per run while a block's separator stays
    /// short.
    fn clustered(seed: u64, n: usize, run: u64) -> Vec<Vec<u8>> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut keys = Vec::with_capacity(n);
        let mut at = 0u64;
        while keys.len() < n {
            at = at.saturating_add(next() % (1 << 40) + 1);
            for _ in 0..(next() % run + 1).min((n - keys.len()) as u64) {
                keys.push(at.to_be_bytes().to_vec());
                at = at.saturating_add(1);
            }
        }
        keys.dedup();
        keys
    }

    #[test]
    fn keys_the_projection_cannot_tell_apart_get_the_sparse_index() {
        // A Redis server's records: user keys that share bytes past any
        // common prefix, beside a system record.
        let mut keys: Vec<Vec<u8>> = (0..20_000u64)
            .map(|i| [b"\x00key:".as_slice(), &i.to_be_bytes()].concat())
            .collect();
        keys.push(b"\x13format".to_vec());
        let t = built(IndexKind::LEARNED, &keys, 100);
        assert!(
            t.sparse_fallback,
            "every user key projects to the same input"
        );
        let (footer, index) = index_of(&t);
        assert_eq!(footer.index_kind, KIND_SPARSE);
        assert_eq!(
            index.block_count(footer.data_pages),
            footer.data_pages as usize,
            "the sparse index names every block"
        );
        // Without the system record the prefix goes past the shared bytes
        // and the model tells every key apart.
        keys.pop();
        let t = built(IndexKind::LEARNED, &keys, 100);
        assert!(!t.sparse_fallback);
        assert!(blind_projection(1, 8));
        assert!(!blind_projection(2, 8));
    }

    #[test]
    fn a_model_larger_than_the_separators_is_replaced_by_them() {
        let keys = clustered(7, 20_000, 20);
        let sparse = built(IndexKind::Sparse, &keys, 100);
        let learned = built(IndexKind::LEARNED, &keys, 100);
        let (sf, si) = index_of(&sparse);
        let (lf, li) = index_of(&learned);
        assert_eq!(sf.index_kind, KIND_SPARSE);
        assert!(
            learned.sparse_fallback,
            "runs of 20 keys at random distances take a segment each"
        );
        assert_eq!(lf.index_kind, KIND_SPARSE);
        assert_eq!(li, si, "the fallback is the sparse index itself");
        assert!(learned.training_micros > 0, "the fit it tried is counted");
        // The same keys spaced evenly fit one line: the model stays.
        let even: Vec<Vec<u8>> = (0..20_000u64)
            .map(|i| (i * 977).to_be_bytes().to_vec())
            .collect();
        let t = built(IndexKind::LEARNED, &even, 100);
        assert!(!t.sparse_fallback);
        assert!(index_of(&t).1.is_learned());
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

        #[test]
        fn a_learned_table_index_is_never_larger_than_the_sparse_one(
            seed in any::<u64>(),
            n in 1usize..6000,
            value_len in prop_oneof![Just(0usize), Just(8), Just(100), Just(1500)],
            uniform in any::<bool>(),
        ) {
            let keys = if uniform {
                let mut k: Vec<Vec<u8>> = (0..n as u64)
                    .map(|i| (i ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes().to_vec())
                    .collect();
                k.sort();
                k.dedup();
                k
            } else {
                clustered(seed, n, 1 + seed % 300)
            };
            let (sf, _) = index_of(&built(IndexKind::Sparse, &keys, value_len));
            for kind in [IndexKind::LEARNED, IndexKind::BOURBON] {
                let t = built(kind, &keys, value_len);
                let (lf, li) = index_of(&t);
                prop_assert!(lf.index_len <= sf.index_len, "{} > {}", lf.index_len, sf.index_len);
                prop_assert_eq!(t.sparse_fallback, !li.is_learned());
            }
        }
    }
}
