//! [`Stream`]: one client connection, over TCP or a Unix socket, read and
//! written alike whichever it is.
//!
//! TCP streams have Nagle's algorithm off from the moment they are
//! accepted: both protocols send whole replies, and waiting to fill a
//! segment would only add latency.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::time::Duration;

use mio::event::Source;
use mio::{Interest, Registry, Token};

/// A connection over TCP (`T`) or a Unix socket (`U`).
#[derive(Debug)]
pub enum Stream<T, U> {
    Tcp(T),
    Unix(U),
}

/// A non-blocking connection, registered in a `mio` poll.
pub type Polled = Stream<mio::net::TcpStream, mio::net::UnixStream>;

/// A blocking connection, served by threads of its own.
pub type Blocking = Stream<std::net::TcpStream, std::os::unix::net::UnixStream>;

/// Runs `$e` on the socket inside `$s`, whichever kind it is.
macro_rules! either {
    ($s:expr, $x:ident => $e:expr) => {
        match $s {
            Stream::Tcp($x) => $e,
            Stream::Unix($x) => $e,
        }
    };
}

impl Polled {
    /// The same connection, blocking.
    pub fn into_blocking(self) -> io::Result<Blocking> {
        let s = match self {
            Stream::Tcp(s) => Stream::Tcp(std::net::TcpStream::from(s)),
            Stream::Unix(s) => Stream::Unix(std::os::unix::net::UnixStream::from(s)),
        };
        either!(&s, x => x.set_nonblocking(false))?;
        Ok(s)
    }

    /// Closes both directions.
    pub fn shutdown(&self) -> io::Result<()> {
        either!(self, s => s.shutdown(Shutdown::Both))
    }

    /// The peer, as `CLIENT LIST` shows it (`/unix` for a Unix socket).
    pub fn peer(&self) -> String {
        match self {
            Stream::Tcp(s) => s.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string()),
            Stream::Unix(_) => "/unix".into(),
        }
    }
}

impl Blocking {
    /// A second handle on the connection (one thread reads while another
    /// writes).
    pub fn try_clone(&self) -> io::Result<Blocking> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        either!(self, s => s.set_read_timeout(t))
    }

    /// Closes both directions.
    pub fn shutdown(&self) -> io::Result<()> {
        either!(self, s => s.shutdown(Shutdown::Both))
    }
}

impl<T: Read, U: Read> Read for Stream<T, U> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        either!(self, s => s.read(buf))
    }
}

impl<T: Write, U: Write> Write for Stream<T, U> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        either!(self, s => s.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        either!(self, s => s.flush())
    }
}

impl<T: Source, U: Source> Source for Stream<T, U> {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        either!(self, s => s.register(r, t, i))
    }

    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        either!(self, s => s.reregister(r, t, i))
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        either!(self, s => s.deregister(r))
    }
}
