//! A store's poisoned state: the first failure after which it can no
//! longer promise durability.
//!
//! Invariants: the first recorded failure wins and is never replaced; a
//! check on the hot path is one atomic load; the error every later call
//! returns carries the first failure's text, whether it was a full
//! device ([`Error::is_no_space`]) and whether it was bad bytes read back
//! ([`Error::is_corruption`]), so a caller can tell "free space and
//! reopen" from "the data is damaged" from "the device is failing".

use std::sync::OnceLock;

use crate::error::{Error, Result};

#[derive(Debug)]
struct Cause {
    text: String,
    no_space: bool,
    corruption: bool,
}

/// Set once, by the first failed write or sync.
#[derive(Debug, Default)]
pub struct Poison {
    first: OnceLock<Cause>,
}

impl Poison {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `e` as the cause unless one was recorded before; true when
    /// this call poisoned the store.
    pub fn set(&self, e: &Error) -> bool {
        self.set_cause(e.to_string(), e)
    }

    /// As [`Poison::set`], with `context` before the error's text.
    pub fn set_in(&self, context: &str, e: &Error) -> bool {
        self.set_cause(format!("{context}: {e}"), e)
    }

    fn set_cause(&self, text: String, e: &Error) -> bool {
        self.set_text(text, e.is_no_space(), e.is_corruption())
    }

    /// Records a cause given as text, for callers whose error type is
    /// their own; `no_space` says whether it was a full device and
    /// `corruption` whether it was bad bytes read back.
    pub fn set_text(&self, text: String, no_space: bool, corruption: bool) -> bool {
        let mut won = false;
        self.first.get_or_init(|| {
            won = true;
            Cause {
                text,
                no_space,
                corruption,
            }
        });
        won
    }

    pub fn is_set(&self) -> bool {
        self.first.get().is_some()
    }

    /// `Err(Error::Poisoned)` once poisoned.
    pub fn check(&self) -> Result<()> {
        match self.first.get() {
            None => Ok(()),
            Some(c) => Err(Error::Poisoned {
                cause: c.text.clone(),
                no_space: c.no_space,
                corruption: c.corruption,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_io::{DeviceError, IoOp};

    fn full_device() -> Error {
        Error::Device(DeviceError::NoSpace {
            op: IoOp::Write,
            offset: 4096,
        })
    }

    #[test]
    fn the_first_cause_wins_and_keeps_its_kind() {
        let p = Poison::new();
        assert!(p.check().is_ok());
        assert!(p.set_in("flush", &full_device()));
        assert!(!p.set(&Error::corruption("page 7", "bad checksum")));
        let e = p.check().unwrap_err();
        assert!(e.is_no_space(), "{e}");
        assert!(!e.is_corruption(), "{e}");
        match e {
            Error::Poisoned { cause, .. } => {
                assert!(cause.starts_with("flush: no space"), "{cause}")
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn other_failures_are_not_a_full_device() {
        let p = Poison::new();
        p.set(&Error::corruption("page 7", "bad checksum"));
        assert!(p.is_set());
        let e = p.check().unwrap_err();
        assert!(!e.is_no_space());
        assert!(e.is_corruption(), "bad bytes poison as corruption: {e}");
        let full = Poison::new();
        full.set(&full_device());
        assert!(!full.check().unwrap_err().is_corruption());
    }
}
