//! [`Listeners`]: the listening sockets, and the poll the one accepting
//! thread waits in.
//!
//! A Unix socket's path is taken over when bound: a file left there (by a
//! server that died, most often) is removed first, as `redis-server` does
//! with its `unixsocket`.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token};

use crate::stream::{Polled, Stream};
use crate::NetError;

const TCP: Token = Token(0);
const UNIX: Token = Token(1);

/// How long accepting pauses after a failure other than "no client
/// waiting" (out of descriptors, most often): the client waits in the
/// backlog meanwhile.
const BACKOFF: Duration = Duration::from_millis(10);

pub struct Listeners {
    poll: Poll,
    events: Events,
    tcp: Option<TcpListener>,
    unix: Option<UnixListener>,
}

impl Listeners {
    /// Listens on `tcp`, on the Unix socket `unix`, or on both.
    pub fn bind(tcp: Option<SocketAddr>, unix: Option<&Path>) -> Result<Self, NetError> {
        if tcp.is_none() && unix.is_none() {
            return Err(NetError::Nothing);
        }
        let poll = Poll::new().map_err(NetError::Poll)?;
        let mut tcp = match tcp {
            Some(addr) => Some(TcpListener::bind(addr).map_err(|source| NetError::Bind {
                addr: addr.to_string(),
                source,
            })?),
            None => None,
        };
        let mut unix = match unix {
            Some(path) => {
                let _ = std::fs::remove_file(path);
                Some(UnixListener::bind(path).map_err(|source| NetError::Bind {
                    addr: path.display().to_string(),
                    source,
                })?)
            }
            None => None,
        };
        let registry = poll.registry();
        if let Some(l) = tcp.as_mut() {
            registry
                .register(l, TCP, Interest::READABLE)
                .map_err(NetError::Poll)?;
        }
        if let Some(l) = unix.as_mut() {
            registry
                .register(l, UNIX, Interest::READABLE)
                .map_err(NetError::Poll)?;
        }
        Ok(Self {
            poll,
            events: Events::with_capacity(16),
            tcp,
            unix,
        })
    }

    /// The TCP address bound (its port chosen by the system when asked
    /// for port 0), if there is a TCP listener.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.tcp.as_ref()?.local_addr().ok()
    }

    /// Waits up to `tick` for clients, and hands each one that connected
    /// to `take`. A failure to accept is logged, not returned: the client
    /// stays in the backlog and a later call takes it.
    pub fn accept(&mut self, tick: Duration, mut take: impl FnMut(Polled)) {
        let Self {
            poll,
            events,
            tcp,
            unix,
        } = self;
        if let Err(e) = poll.poll(events, Some(tick)) {
            if e.kind() != ErrorKind::Interrupted {
                log::error!("accept poll: {e}");
                std::thread::sleep(tick);
            }
            return;
        }
        for ev in events.iter() {
            loop {
                let got = match (ev.token(), &*tcp, &*unix) {
                    (TCP, Some(l), _) => l.accept().and_then(|(s, _)| {
                        s.set_nodelay(true)?;
                        Ok(Stream::Tcp(s))
                    }),
                    (UNIX, _, Some(l)) => l.accept().map(|(s, _)| Stream::Unix(s)),
                    _ => break,
                };
                match got {
                    Ok(s) => take(s),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        log::warn!("accept: {e}");
                        std::thread::sleep(BACKOFF);
                        break;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::Instant;

    use super::*;

    /// Accepts until `n` clients are in, or fails after five seconds.
    fn accept_n(l: &mut Listeners, n: usize) -> Vec<Polled> {
        let mut got = Vec::new();
        let start = Instant::now();
        while got.len() < n {
            assert!(start.elapsed() < Duration::from_secs(5), "no client came");
            l.accept(Duration::from_millis(50), |s| got.push(s));
        }
        got
    }

    #[test]
    fn clients_of_both_sockets_are_taken_and_served_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sock");
        // A file left at the path is taken over.
        std::fs::write(&path, b"stale").unwrap();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut l = Listeners::bind(Some(any), Some(&path)).unwrap();
        let addr = l.local_addr().unwrap();
        assert_ne!(addr.port(), 0);
        let mut a = std::net::TcpStream::connect(addr).unwrap();
        let mut b = std::os::unix::net::UnixStream::connect(&path).unwrap();
        for c in [&mut a as &mut dyn ReadWrite, &mut b] {
            c.write_all(b"yo!").unwrap();
        }
        let got = accept_n(&mut l, 2);
        let mut tcp = 0;
        for s in got {
            match &s {
                Stream::Tcp(t) => {
                    assert!(t.nodelay().unwrap());
                    assert!(s.peer().starts_with("127.0.0.1:"));
                    tcp += 1;
                }
                Stream::Unix(_) => assert_eq!(s.peer(), "/unix"),
            }
            let mut s = s.into_blocking().unwrap();
            let mut w = s.try_clone().unwrap();
            w.write_all(b"hi").unwrap();
            let mut buf = [0u8; 3];
            s.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"yo!");
            s.shutdown().unwrap();
        }
        assert_eq!(tcp, 1);
        for c in [&mut a as &mut dyn ReadWrite, &mut b] {
            let mut buf = [0u8; 2];
            c.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"hi");
            let mut rest = Vec::new();
            assert_eq!(c.read_to_end(&mut rest).unwrap(), 0, "closed after");
        }
    }

    trait ReadWrite: Read + Write {}
    impl<T: Read + Write> ReadWrite for T {}

    #[test]
    fn binding_says_what_it_could_not_listen_on() {
        assert!(matches!(
            Listeners::bind(None, None),
            Err(NetError::Nothing)
        ));
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        match Listeners::bind(Some(addr), None) {
            Err(NetError::Bind { addr: a, .. }) => assert_eq!(a, addr.to_string()),
            other => panic!("bound a port in use: {:?}", other.map(|l| l.local_addr())),
        }
        let missing = Path::new("/nonexistent-dir-of-ferrite/sock");
        assert!(matches!(
            Listeners::bind(None, Some(missing)),
            Err(NetError::Bind { .. })
        ));
    }

    #[test]
    fn with_no_client_waiting_accept_returns_after_its_tick() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Listeners::bind(None, Some(&dir.path().join("s"))).unwrap();
        assert_eq!(l.local_addr(), None);
        let t = Instant::now();
        l.accept(Duration::from_millis(30), |_| panic!("no client connected"));
        assert!(t.elapsed() >= Duration::from_millis(20));
    }
}
