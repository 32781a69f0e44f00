//! [`NetError`]: what binding the listeners can fail with.

use std::io;

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The address or socket path could not be bound (in use, no
    /// permission, no such directory).
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: io::Error },
    /// Neither a TCP address nor a Unix socket was given.
    #[error("nothing to listen on: give a TCP address or a Unix socket")]
    Nothing,
    /// The poll over the listeners could not be made.
    #[error("cannot poll the listening sockets: {0}")]
    Poll(io::Error),
}
