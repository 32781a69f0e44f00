//! # ferrite-process: server processes under test
//!
//! Every test, the crash tester and the experiments start servers as
//! processes — `ferrite serve`, `ferrite volume serve`, `redis-server`,
//! `redis-sentinel` — and need the same four things: start one, know when
//! it serves, measure it, and stop it (or kill it) without leaving it
//! behind. This crate is that, once; and the rule for a test whose
//! outside program is missing ([`tool`]).
//!
//! A server is ready when:
//! - it prints its first line on stdout ([`Ready::FirstLine`]): `ferrite
//!   serve` and `ferrite volume serve` print their address only after
//!   recovery, so the line also says where they listen (start them on
//!   port 0 and read it back: no port race);
//! - or a port accepts connections ([`Ready::Port`]), for servers that
//!   print nothing useful (`redis-server`); [`free_port`] picks one;
//! - or a Unix socket does ([`Ready::Socket`]: nbdkit under a guest).
//!
//! | module | owns |
//! |---|---|
//! | `server` | [`Server`]: start, readiness, stop, kill, RSS and CPU time |
//! | `port` | [`free_port`], [`wait_for_port`], [`wait_for_socket`] |
//! | `redis` | [`redis_server`]: the peer's command line |
//! | `commit` | [`BUILD_COMMIT`]: the commit the harness was built from |
//! | `tool` | outside programs a test needs: skipped when missing, failed under CI |
//! | `error` | [`ProcessError`] |

mod commit;
mod error;
mod port;
mod redis;
mod server;
pub mod tool;

pub use commit::BUILD_COMMIT;
pub use error::{ProcessError, Result};
pub use port::{free_port, wait_for_port, wait_for_socket};
pub use redis::redis_server;
pub use server::{Ready, Server};
