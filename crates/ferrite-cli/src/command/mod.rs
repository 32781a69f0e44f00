//! One module per subcommand.

pub mod demo;
pub mod engines;
pub mod inspect;
pub mod io_probe;
pub mod kv;
