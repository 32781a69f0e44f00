//! One module per subcommand.

pub mod backup;
pub mod demo;
pub mod engines;
pub mod harness;
pub mod inspect;
pub mod kv;
pub mod rask;
pub mod serve;
pub mod trace;
pub mod volume;
