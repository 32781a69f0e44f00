//! Heap buffers aligned for direct I/O.
//!
//! O_DIRECT requires the buffer address, the length and the file offset to be
//! multiples of the logical block size. An [`AlignedBuf`] is always aligned to
//! [`BUF_ALIGN`] (4 KiB, the largest logical block size ferrite supports), so
//! any of them can be handed to any device; the length is the caller's choice
//! and is checked by the device.
//!
//! Many equal buffers (a buffer pool's frames) come from [`AlignedBuf::slab`]:
//! one allocation cut into disjoint buffers. Allocating them one by one would
//! cost each a second page of memory, since an aligned allocation's header
//! sits in the page before it. A slab of [`HUGE_SLAB`] bytes or more is
//! mapped on its own, aligned to 2 MiB and advised to use transparent huge
//! pages: a lookup in a large buffer pool touches a page at random, and
//! with 4 KiB pages nearly every such touch also misses the TLB and walks
//! the page tables (twice over under a hypervisor). Where the kernel gives
//! no huge pages the mapping works as any other.

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

/// Alignment of every [`AlignedBuf`].
pub const BUF_ALIGN: usize = 4096;

/// A zero-initialised, 4 KiB-aligned, fixed-length byte buffer.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    /// For a buffer cut from a slab: the slab, freed with its last buffer.
    slab: Option<Arc<Slab>>,
}

/// Slabs at least this large are mapped for huge pages (see the module doc).
pub const HUGE_SLAB: usize = 4 << 20;

/// The huge page size slabs are aligned to.
const HUGE_PAGE: usize = 2 << 20;

/// One allocation shared by the buffers cut from it.
struct Slab {
    ptr: NonNull<u8>,
    source: SlabSource,
}

enum SlabSource {
    Heap(Layout),
    /// An anonymous mapping of this many bytes of its own.
    Mapped(usize),
}

// SAFETY: the slab is only an allocation to free; its bytes are reached
// through the disjoint buffers cut from it, each owned by one AlignedBuf.
unsafe impl Send for Slab {}
// SAFETY: as above; a Slab itself is never read or written.
unsafe impl Sync for Slab {}

impl Drop for Slab {
    fn drop(&mut self) {
        match self.source {
            // SAFETY: allocated in `AlignedBuf::slab` with this layout.
            SlabSource::Heap(layout) => unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) },
            // SAFETY: mapped in `map_huge` with this length; the buffers
            // cut from it are gone, since they hold the slab alive.
            SlabSource::Mapped(len) => unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), len);
            },
        }
    }
}

/// Allocates zeroed memory for `layout`, whose size callers keep non-zero.
fn alloc_zeroed(layout: Layout) -> NonNull<u8> {
    // SAFETY: every caller passes a layout of non-zero size.
    let raw = unsafe { alloc::alloc_zeroed(layout) };
    let Some(ptr) = NonNull::new(raw) else {
        alloc::handle_alloc_error(layout)
    };
    ptr
}

/// Maps `len` zeroed bytes aligned to [`HUGE_PAGE`] and advises the kernel
/// to back them with huge pages; `None` if the mapping fails.
fn map_huge(len: usize) -> Option<NonNull<u8>> {
    let over = len.checked_add(HUGE_PAGE)?;
    // SAFETY: an anonymous private mapping at an address the kernel picks.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            over,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let start = raw as usize;
    let head = start.next_multiple_of(HUGE_PAGE) - start;
    let tail = over - head - len;
    // SAFETY: the head and tail lie inside the mapping just made and
    // outside the aligned `len` bytes kept; both are multiples of the page
    // size (the mapping's start and `len` are page-aligned).
    unsafe {
        let base = raw.cast::<u8>();
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap(base.add(head + len).cast(), tail);
        }
        let kept = base.add(head);
        // Advice only: without huge pages the mapping still works.
        libc::madvise(kept.cast(), len, libc::MADV_HUGEPAGE);
        NonNull::new(kept)
    }
}

// SAFETY: AlignedBuf owns its bytes exclusively, like Box<[u8]> (a slab's
// buffers own disjoint parts of it).
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of `len` zero bytes. `len` may be zero.
    pub fn zeroed(len: usize) -> Self {
        if len == 0 {
            return Self {
                ptr: aligned_dangling(),
                len: 0,
                slab: None,
            };
        }
        Self {
            ptr: alloc_zeroed(Self::layout(len)),
            len,
            slab: None,
        }
    }

    /// `count` zeroed buffers of `len` bytes cut from one allocation (each
    /// starting on a [`BUF_ALIGN`] boundary), freed when the last of them
    /// is dropped.
    pub fn slab(count: usize, len: usize) -> Vec<AlignedBuf> {
        let stride = len.div_ceil(BUF_ALIGN).max(1) * BUF_ALIGN;
        if count == 0 || len == 0 {
            return (0..count).map(|_| Self::zeroed(0)).collect();
        }
        let total = stride
            .checked_mul(count)
            .unwrap_or_else(|| alloc::handle_alloc_error(Layout::new::<u8>()));
        let mapped = if total >= HUGE_SLAB {
            map_huge(total)
        } else {
            None
        };
        let slab = match mapped {
            Some(ptr) => Slab {
                ptr,
                source: SlabSource::Mapped(total),
            },
            None => {
                let layout = Self::layout(total);
                Slab {
                    ptr: alloc_zeroed(layout),
                    source: SlabSource::Heap(layout),
                }
            }
        };
        let base = slab.ptr;
        let slab = Arc::new(slab);
        (0..count)
            .map(|i| {
                // SAFETY: i * stride + len <= total, inside the allocation,
                // and the regions of different i do not overlap.
                let p = unsafe { base.as_ptr().add(i * stride) };
                Self {
                    ptr: NonNull::new(p).unwrap_or(base),
                    len,
                    slab: Some(slab.clone()),
                }
            })
            .collect()
    }

    /// The address of the first byte (for [`prefetch`]).
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// A buffer holding a copy of `data`.
    pub fn from_slice(data: &[u8]) -> Self {
        let mut buf = Self::zeroed(data.len());
        buf.copy_from_slice(data);
        buf
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn layout(len: usize) -> Layout {
        match Layout::from_size_align(len, BUF_ALIGN) {
            Ok(l) => l,
            // Only reachable for lengths near isize::MAX, which no allocator serves.
            Err(_) => alloc::handle_alloc_error(Layout::new::<u8>()),
        }
    }
}

/// Asks the CPU to bring the `len` bytes at `addr` into its caches,
/// without waiting for them: a buffer pool names the page a lookup reads
/// next before it takes the frame's latch, so that the page's first lines
/// and the latch's line are fetched together instead of one after the
/// other. A hint only: any address may be given (a prefetch reads nothing
/// the program sees and never faults); elsewhere than x86-64 it does
/// nothing.
#[inline]
pub fn prefetch(addr: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for line in (0..len).step_by(64) {
        let p = addr.wrapping_add(line) as *const i8;
        // SAFETY: a prefetch has no effect the program can observe and
        // does not fault on any address.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (addr, len);
}

fn aligned_dangling() -> NonNull<u8> {
    // A non-null, BUF_ALIGN-aligned address that is never dereferenced.
    NonNull::new(std::ptr::without_provenance_mut::<u8>(BUF_ALIGN)).unwrap_or(NonNull::dangling())
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // A slab's buffer frees nothing itself: the slab goes with its last one.
        if self.len != 0 && self.slab.is_none() {
            // SAFETY: allocated in `zeroed` with this exact layout.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
        }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len initialised bytes (or dangling with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and we hold &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Default for AlignedBuf {
    /// An empty buffer.
    fn default() -> Self {
        Self::zeroed(0)
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> Self {
        Self::from_slice(self)
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

/// A buffer given over to 32-bit atomics, for tables that threads update
/// without a lock in memory that was a buffer (a buffer pool's frame
/// turned into route tables). Zeroed when made; its bytes are only ever
/// reached as atomics from then on.
pub struct AtomicWords {
    buf: AlignedBuf,
}

impl AtomicWords {
    pub fn new(mut buf: AlignedBuf) -> Self {
        buf.fill(0);
        Self { buf }
    }
}

impl Deref for AtomicWords {
    type Target = [AtomicU32];
    fn deref(&self) -> &[AtomicU32] {
        // SAFETY: the buffer is BUF_ALIGN-aligned (a multiple of
        // AtomicU32's alignment), valid for `len` initialised bytes, owned
        // by this value alone, and reached only through this slice of
        // atomics, whose size is u32's; a dangling empty buffer gives an
        // empty slice.
        unsafe {
            std::slice::from_raw_parts(
                self.buf.ptr.as_ptr().cast::<AtomicU32>(),
                self.buf.len / std::mem::size_of::<AtomicU32>(),
            )
        }
    }
}

impl std::fmt::Debug for AtomicWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicWords")
            .field("words", &self.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slab_buffer_turned_into_words_is_zeroed_and_shared_by_threads() {
        let mut bufs = AlignedBuf::slab(2, 4096);
        bufs[0].fill(0xff);
        let words = Arc::new(AtomicWords::new(bufs.remove(0)));
        assert_eq!(words.len(), 1024);
        assert!(words
            .iter()
            .all(|w| w.load(std::sync::atomic::Ordering::Relaxed) == 0));
        let threads: Vec<_> = (0..2u32)
            .map(|t| {
                let w = words.clone();
                std::thread::spawn(move || {
                    for i in (t as usize..1024).step_by(2) {
                        w[i].store(i as u32 + 1, std::sync::atomic::Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert!(words
            .iter()
            .enumerate()
            .all(|(i, w)| w.load(std::sync::atomic::Ordering::Relaxed) == i as u32 + 1));
        // The other buffer of the slab is untouched.
        assert!(bufs[0].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_large_slab_is_mapped_on_its_own_huge_page_aligned_and_zeroed() {
        let count = HUGE_SLAB / 4096 + 3;
        let mut bufs = AlignedBuf::slab(count, 4096);
        assert_eq!(bufs[0].addr() % HUGE_PAGE, 0);
        for (i, b) in bufs.iter_mut().enumerate().step_by(97) {
            assert!(b.iter().all(|&x| x == 0));
            b.fill(i as u8);
        }
        let last = bufs.pop().expect("buffers");
        assert_eq!(last.addr() - bufs[0].addr(), (count - 1) * 4096);
        drop(bufs);
        // The mapping lives as long as its last buffer.
        assert!(last.iter().all(|&x| x == 0));
    }

    #[test]
    fn slab_buffers_are_aligned_disjoint_and_outlive_each_other() {
        let mut bufs = AlignedBuf::slab(5, 4096);
        for (i, b) in bufs.iter_mut().enumerate() {
            assert_eq!(b.as_ptr() as usize % BUF_ALIGN, 0);
            assert!(b.iter().all(|&x| x == 0));
            b.fill(i as u8 + 1);
        }
        for (i, b) in bufs.iter().enumerate() {
            assert!(
                b.iter().all(|&x| x == i as u8 + 1),
                "buffer {i} was overwritten"
            );
        }
        let last = bufs.pop().unwrap();
        drop(bufs);
        assert!(
            last.iter().all(|&x| x == 5),
            "the slab lives while a buffer does"
        );
        let odd = AlignedBuf::slab(3, 100);
        assert_eq!(
            odd[1].as_ptr() as usize - odd[0].as_ptr() as usize,
            BUF_ALIGN
        );
        assert!(AlignedBuf::slab(0, 4096).is_empty());
    }

    #[test]
    fn alignment_and_zeroing() {
        for len in [0, 1, 512, 4096, 12288, 65536 + 7] {
            let b = AlignedBuf::zeroed(len);
            assert_eq!(b.as_ptr() as usize % BUF_ALIGN, 0, "len {len}");
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn copy_and_clone() {
        let b = AlignedBuf::from_slice(b"hello");
        let c = b.clone();
        assert_eq!(&*c, b"hello");
        assert_ne!(b.as_ptr(), c.as_ptr());
    }
}
