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
//! sits in the page before it.

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
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

/// One allocation shared by the buffers cut from it.
struct Slab {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the slab is only an allocation to free; its bytes are reached
// through the disjoint buffers cut from it, each owned by one AlignedBuf.
unsafe impl Send for Slab {}
// SAFETY: as above; a Slab itself is never read or written.
unsafe impl Sync for Slab {}

impl Drop for Slab {
    fn drop(&mut self) {
        // SAFETY: allocated in `AlignedBuf::slab` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
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
        let layout = Self::layout(len);
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        Self {
            ptr,
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
        let layout = Self::layout(total);
        // SAFETY: layout has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(base) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        let slab = Arc::new(Slab { ptr: base, layout });
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

#[cfg(test)]
mod tests {
    use super::*;

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
