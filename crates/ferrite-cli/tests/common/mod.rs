//! What the `ferrite` binary's integration tests share: finding the
//! outside programs they drive (see `ferrite_process::tool`: a missing
//! one skips its test, or under CI fails it).

#[allow(unused_imports, reason = "each test binary uses a part of it")]
pub use ferrite_process::tool::{have, missing};
