//! Heap buffers aligned for direct I/O.
//!
//! O_DIRECT requires the buffer address, the length and the file offset to be
//! multiples of the logical block size. An [`AlignedBuf`] is always aligned to
//! [`BUF_ALIGN`] (4 KiB, the largest logical block size ferrite supports), so
//! any of them can be handed to any device; the length is the caller's choice
//! and is checked by the device.

use std::alloc::{self, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Alignment of every [`AlignedBuf`].
pub const BUF_ALIGN: usize = 4096;

/// A zero-initialised, 4 KiB-aligned, fixed-length byte buffer.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like Box<[u8]>.
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
            };
        }
        let layout = Self::layout(len);
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            alloc::handle_alloc_error(layout)
        };
        Self { ptr, len }
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
    NonNull::new(BUF_ALIGN as *mut u8).unwrap_or(NonNull::dangling())
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len != 0 {
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
