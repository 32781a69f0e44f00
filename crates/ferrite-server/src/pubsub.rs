//! Pub/sub: which connections listen to which channels and patterns,
//! and delivering a message to each of them.
//!
//! Invariants: a connection is subscribed to a channel (or pattern) at
//! most once; `PUBLISH` answers the number of deliveries made (one per
//! channel subscriber and one per matching pattern subscription); a
//! message goes to each receiver's mailbox in the receiver's protocol.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::glob;
use crate::mailbox::Mailbox;
use crate::reply::Reply;

type Listeners = HashMap<u64, Arc<Mailbox>>;

#[derive(Default)]
struct Inner {
    channels: HashMap<Vec<u8>, Listeners>,
    /// Ordered so deliveries to patterns follow one order.
    patterns: BTreeMap<Vec<u8>, Listeners>,
}

#[derive(Default)]
pub struct PubSub {
    inner: RwLock<Inner>,
}

impl PubSub {
    /// Says whether the subscription is new.
    pub fn subscribe(&self, client: u64, mailbox: &Arc<Mailbox>, channel: &[u8]) -> bool {
        let mut i = self.inner.write();
        i.channels
            .entry(channel.to_vec())
            .or_default()
            .insert(client, mailbox.clone())
            .is_none()
    }

    pub fn unsubscribe(&self, client: u64, channel: &[u8]) -> bool {
        let mut i = self.inner.write();
        let Some(l) = i.channels.get_mut(channel) else {
            return false;
        };
        let was = l.remove(&client).is_some();
        if l.is_empty() {
            i.channels.remove(channel);
        }
        was
    }

    pub fn psubscribe(&self, client: u64, mailbox: &Arc<Mailbox>, pattern: &[u8]) -> bool {
        let mut i = self.inner.write();
        i.patterns
            .entry(pattern.to_vec())
            .or_default()
            .insert(client, mailbox.clone())
            .is_none()
    }

    pub fn punsubscribe(&self, client: u64, pattern: &[u8]) -> bool {
        let mut i = self.inner.write();
        let Some(l) = i.patterns.get_mut(pattern) else {
            return false;
        };
        let was = l.remove(&client).is_some();
        if l.is_empty() {
            i.patterns.remove(pattern);
        }
        was
    }

    /// Delivers `message` on `channel`; answers the deliveries made.
    pub fn publish(&self, channel: &[u8], message: &[u8]) -> i64 {
        let i = self.inner.read();
        let mut n = 0;
        if let Some(l) = i.channels.get(channel) {
            let msg = Reply::Push(vec![
                Reply::bulk("message"),
                Reply::bulk(channel),
                Reply::bulk(message),
            ]);
            for m in l.values() {
                m.push(&msg);
                n += 1;
            }
        }
        for (pattern, l) in &i.patterns {
            if !glob::matches(pattern, channel) {
                continue;
            }
            let msg = Reply::Push(vec![
                Reply::bulk("pmessage"),
                Reply::bulk(pattern.as_slice()),
                Reply::bulk(channel),
                Reply::bulk(message),
            ]);
            for m in l.values() {
                m.push(&msg);
                n += 1;
            }
        }
        n
    }

    /// Channels with subscribers, matching `pattern` if given.
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Vec<u8>> {
        let i = self.inner.read();
        let mut out: Vec<Vec<u8>> = i
            .channels
            .keys()
            .filter(|c| pattern.is_none_or(|p| glob::matches(p, c)))
            .cloned()
            .collect();
        out.sort();
        out
    }

    /// Subscribers of `channel`.
    pub fn numsub(&self, channel: &[u8]) -> usize {
        self.inner
            .read()
            .channels
            .get(channel)
            .map_or(0, |l| l.len())
    }

    /// Distinct patterns subscribed to.
    pub fn numpat(&self) -> usize {
        self.inner.read().patterns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mailbox::testing::mailbox;

    #[test]
    fn channel_and_pattern_subscribers_each_get_the_message() {
        let ps = PubSub::default();
        let (a, _) = mailbox();
        let (b, _) = mailbox();
        assert!(ps.subscribe(1, &a, b"news"));
        assert!(!ps.subscribe(1, &a, b"news"));
        assert!(ps.psubscribe(2, &b, b"n*"));
        assert_eq!(ps.publish(b"news", b"hi"), 2);
        assert_eq!(ps.publish(b"other", b"hi"), 0);
        assert_eq!(
            a.take().bytes,
            b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n".to_vec()
        );
        assert_eq!(
            b.take().bytes,
            b"*4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$2\r\nhi\r\n".to_vec()
        );
        assert_eq!((ps.numsub(b"news"), ps.numpat()), (1, 1));
        assert_eq!(ps.channels(Some(b"n*")), vec![b"news".to_vec()]);
        assert!(ps.unsubscribe(1, b"news") && !ps.unsubscribe(1, b"news"));
        assert!(ps.punsubscribe(2, b"n*"));
        assert_eq!(ps.publish(b"news", b"hi"), 0);
        assert!(ps.channels(None).is_empty());
    }
}
