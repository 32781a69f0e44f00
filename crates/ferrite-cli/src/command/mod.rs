//! One module per subcommand.

pub mod bench;
pub mod demo;
pub mod engines;
pub mod inspect;
pub mod io_probe;
pub mod kv;
pub mod rask;
pub mod repro;
pub mod trace;
