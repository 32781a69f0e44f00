//! A connection's mailbox: what other connections send it between its
//! own replies — pub/sub messages, keyspace events, the answer to a
//! blocked command — and the means to wake it.
//!
//! Invariants: bytes leave in the order they were put in; a connection
//! learns of new mail by being woken, never by polling; a mailbox that
//! grows past its limit (a subscriber that does not read) is marked
//! overflowing and its connection is closed, as Redis closes a client
//! past its pub/sub output-buffer limit.

use std::sync::atomic::{AtomicU8, Ordering};

use parking_lot::Mutex;

use crate::reply::Reply;

/// Bytes a mailbox may hold before its client is dropped (Redis's
/// `client-output-buffer-limit pubsub` hard limit).
pub const LIMIT: usize = 32 << 20;

/// Wakes a connection's loop.
pub trait Wake: Send + Sync {
    fn wake(&self);
}

impl Wake for mio::Waker {
    fn wake(&self) {
        // A failed wake leaves the mail for the next tick.
        let _ = mio::Waker::wake(self);
    }
}

#[derive(Default)]
struct Inbox {
    bytes: Vec<u8>,
    /// A blocked command was answered (its reply is in `bytes`).
    served: bool,
    overflow: bool,
    /// The connection is to close (`CLIENT KILL`).
    close: bool,
}

/// What a connection finds in its mailbox.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Mail {
    pub bytes: Vec<u8>,
    pub served: bool,
    pub overflow: bool,
    pub close: bool,
}

pub struct Mailbox {
    inbox: Mutex<Inbox>,
    waker: Box<dyn Wake>,
    /// The connection's protocol, for encoding what others send it.
    proto: AtomicU8,
}

impl Mailbox {
    pub fn new(waker: Box<dyn Wake>) -> Self {
        Self {
            inbox: Mutex::new(Inbox::default()),
            waker,
            proto: AtomicU8::new(2),
        }
    }

    pub fn set_proto(&self, proto: u8) {
        self.proto.store(proto, Ordering::Release);
    }

    pub fn proto(&self) -> u8 {
        self.proto.load(Ordering::Acquire)
    }

    /// Sends a message (pub/sub, an event).
    pub fn push(&self, r: &Reply) {
        let mut inbox = self.inbox.lock();
        if inbox.overflow {
            return;
        }
        r.encode(self.proto(), &mut inbox.bytes);
        if inbox.bytes.len() > LIMIT {
            inbox.overflow = true;
            inbox.bytes = Vec::new();
        }
        drop(inbox);
        self.waker.wake();
    }

    /// Answers the connection's blocked command with `bytes`.
    pub fn serve(&self, bytes: &[u8]) {
        let mut inbox = self.inbox.lock();
        inbox.bytes.extend_from_slice(bytes);
        inbox.served = true;
        drop(inbox);
        self.waker.wake();
    }

    /// Asks the connection to close.
    pub fn close(&self) {
        self.inbox.lock().close = true;
        self.waker.wake();
    }

    /// Wakes the connection with nothing to deliver (it re-checks its
    /// state: shutdown, an unblocked command).
    pub fn nudge(&self) {
        self.waker.wake();
    }

    /// Everything delivered so far.
    pub fn take(&self) -> Mail {
        let mut inbox = self.inbox.lock();
        let i = std::mem::take(&mut *inbox);
        Mail {
            bytes: i.bytes,
            served: i.served,
            overflow: i.overflow,
            close: i.close,
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    /// Counts wakes.
    #[derive(Default)]
    pub struct Counter(pub Arc<AtomicUsize>);

    impl Wake for Counter {
        fn wake(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn mailbox() -> (Arc<Mailbox>, Arc<AtomicUsize>) {
        let c = Counter::default();
        let n = c.0.clone();
        (Arc::new(Mailbox::new(Box::new(c))), n)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::testing::mailbox;
    use super::*;

    #[test]
    fn mail_arrives_in_order_in_the_connections_protocol_and_wakes_it() {
        let (m, wakes) = mailbox();
        m.push(&Reply::Push(vec![Reply::bulk("a")]));
        m.set_proto(3);
        m.push(&Reply::Push(vec![Reply::bulk("b")]));
        m.serve(b":1\r\n");
        assert_eq!(wakes.load(Ordering::Relaxed), 3);
        let mail = m.take();
        assert_eq!(
            mail.bytes,
            b"*1\r\n$1\r\na\r\n>1\r\n$1\r\nb\r\n:1\r\n".to_vec()
        );
        assert!(mail.served && !mail.overflow);
        assert_eq!(m.take(), Mail::default());
    }

    #[test]
    fn a_mailbox_past_its_limit_overflows() {
        let (m, _) = mailbox();
        let big = Reply::Bulk(vec![0; LIMIT / 4]);
        for _ in 0..5 {
            m.push(&big);
        }
        assert!(m.take().overflow);
    }
}
