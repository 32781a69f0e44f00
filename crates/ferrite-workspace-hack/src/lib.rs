//! No code: a dependency that every workspace member takes, listing the
//! third-party crates whose features would otherwise differ from one
//! build to the next (its Cargo.toml, written by `cargo hakari generate`).
//!
//! Cargo resolves features per build. `cargo build -p ferrite-cli` sees
//! the server's Lua turn on `parking_lot`'s `arc_lock`; `-p
//! ferrite-crashtest` sees the Redis client turn on `num-traits`' `i128`
//! and extra `syn` features. A crate with other features is another build,
//! and so is every crate above it: without this list, building the crash
//! tester after `ferrite` compiled every engine a second time. With it,
//! only the crates a binary alone uses are built again.
//!
//! Invariant: the list is the union of what the members' builds ask for
//! (`cargo hakari verify`); it adds features, never a crate that changes
//! behaviour.
