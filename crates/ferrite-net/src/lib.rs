//! The sockets ferrite's servers accept clients on: a TCP address, a Unix
//! socket, or both, behind one [`Listeners`] and one [`Stream`].
//!
//! `ferrite serve` keeps its connections non-blocking in `mio` event loops
//! ([`Polled`]); `ferrite volume serve` gives each connection threads of
//! its own and blocking reads ([`Blocking`], from
//! [`Polled::into_blocking`]). Both accept the same way: one thread waits
//! in a poll on the listeners, so a client is taken the moment it
//! connects, and looks at its stop flag at least once a tick.

mod error;
mod listeners;
mod stream;

pub use error::NetError;
pub use listeners::Listeners;
pub use stream::{Blocking, Polled, Stream};
