//! Decoding client requests: RESP multibulk arrays (`*2\r\n$3\r\nGET\r\n
//! $1\r\nk\r\n`) and inline commands (`GET k\r\n`, what a person types
//! into telnet), as Redis's own server accepts them.
//!
//! The decoder is pure and incremental: [`decode`] looks at the bytes
//! received so far and returns a whole command and how many bytes it
//! took, or `None` until the rest arrives. Limits are checked as soon as
//! a header announces a length, so a client cannot make the server buffer
//! a bulk string or an argument list past them. Errors carry Redis's own
//! message text; the connection that sent them is closed after the reply,
//! as Redis does, since the stream can no longer be framed.

use std::ops::Range;

/// Bounds on what one request may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Longest bulk string (an argument), in bytes.
    pub max_bulk: usize,
    /// Most arguments in one command, the command name included.
    pub max_args: usize,
    /// Longest inline command line, in bytes.
    pub max_inline: usize,
}

impl Default for Limits {
    /// 4 MiB arguments (the engines' value limit, so every value fits),
    /// Redis's own multibulk and inline bounds.
    fn default() -> Self {
        Self {
            max_bulk: 4 << 20,
            max_args: 1024 * 1024,
            max_inline: 64 << 10,
        }
    }
}

/// A request the stream cannot carry on from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub String);

fn err<T>(what: impl Into<String>) -> Result<T, ProtocolError> {
    Err(ProtocolError(what.into()))
}

/// A command's arguments, the name first, as commands see them: slices
/// of the bytes the client sent, not copies.
pub type Args<'a> = [&'a [u8]];

/// A command's arguments kept past the turn that received them (a
/// `MULTI` queue, a blocked command).
pub type OwnedArgs = Vec<Vec<u8>>;

/// Copies arguments to keep them.
pub fn to_owned(args: &Args) -> OwnedArgs {
    args.iter().map(|a| a.to_vec()).collect()
}

/// Kept arguments as commands see them.
pub fn view(args: &OwnedArgs) -> Vec<&[u8]> {
    args.iter().map(Vec::as_slice).collect()
}

/// A whole request at the start of a buffer, as [`decode_frame`] finds it.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A multibulk request of `used` bytes; its arguments are the spans
    /// of the buffer pushed to the caller's list (none: an empty request,
    /// which Redis ignores).
    Spans { used: usize },
    /// An inline command of `used` bytes, its quotes and escapes undone
    /// (empty for a blank line).
    Inline { args: OwnedArgs, used: usize },
}

/// Decodes the first request in `buf` without copying a multibulk
/// request's arguments: where each lies is pushed to `spans` (cleared
/// first). `Ok(None)` when more bytes are needed.
pub fn decode_frame(
    buf: &[u8],
    limits: &Limits,
    spans: &mut Vec<Range<usize>>,
) -> Result<Option<Frame>, ProtocolError> {
    spans.clear();
    match buf.first() {
        None => Ok(None),
        Some(b'*') => Ok(multibulk(buf, limits, spans)?.map(|used| Frame::Spans { used })),
        Some(_) => Ok(inline(buf, limits)?.map(|(args, used)| Frame::Inline { args, used })),
    }
}

/// Decodes the first request in `buf` into owned arguments:
/// `Ok(Some((args, used)))` when it is complete, `Ok(None)` when more
/// bytes are needed. Empty arguments for an empty request.
pub fn decode(buf: &[u8], limits: &Limits) -> Result<Option<(OwnedArgs, usize)>, ProtocolError> {
    let mut spans = Vec::new();
    Ok(match decode_frame(buf, limits, &mut spans)? {
        None => None,
        Some(Frame::Spans { used }) => {
            Some((spans.into_iter().map(|r| buf[r].to_vec()).collect(), used))
        }
        Some(Frame::Inline { args, used }) => Some((args, used)),
    })
}

/// The line starting at `at` (without its `\r\n`) and where the next
/// begins, if the line is complete.
fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let end = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[at..end], end + 2))
}

/// A header's decimal number (`*3`, `$5`): Redis accepts an optional
/// minus sign and digits only, at most 20 characters.
fn number(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

fn multibulk(
    buf: &[u8],
    limits: &Limits,
    spans: &mut Vec<Range<usize>>,
) -> Result<Option<usize>, ProtocolError> {
    let Some((head, mut at)) = line(buf, 0) else {
        // A header line longer than any valid one will never end well.
        return if buf.len() > limits.max_inline {
            err("too big mbulk count string")
        } else {
            Ok(None)
        };
    };
    let Some(count) = number(&head[1..]) else {
        return err("invalid multibulk length");
    };
    if count > limits.max_args as i64 {
        return err("invalid multibulk length");
    }
    if count <= 0 {
        return Ok(Some(at));
    }
    for _ in 0..count {
        let Some((head, next)) = line(buf, at) else {
            return if buf.len() - at > limits.max_inline {
                err("too big bulk count string")
            } else {
                Ok(None)
            };
        };
        match head.first() {
            Some(b'$') => {}
            Some(&c) => return err(format!("expected '$', got '{}'", c as char)),
            None => return err("expected '$', got ''"),
        }
        let len = match number(&head[1..]) {
            Some(n) if (0..=limits.max_bulk as i64).contains(&n) => n as usize,
            _ => return err("invalid bulk length"),
        };
        let end = next + len;
        if buf.len() < end + 2 {
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return err("invalid bulk format");
        }
        spans.push(next..end);
        at = end + 2;
    }
    Ok(Some(at))
}

fn inline(buf: &[u8], limits: &Limits) -> Result<Option<(OwnedArgs, usize)>, ProtocolError> {
    let Some(nl) = buf.iter().position(|&b| b == b'\n') else {
        return if buf.len() > limits.max_inline {
            err("too big inline request")
        } else {
            Ok(None)
        };
    };
    if nl > limits.max_inline {
        return err("too big inline request");
    }
    let text = buf[..nl].strip_suffix(b"\r").unwrap_or(&buf[..nl]);
    let args =
        split_args(text).ok_or_else(|| ProtocolError("unbalanced quotes in request".into()))?;
    if args.len() > limits.max_args {
        return err("invalid multibulk length");
    }
    if args.iter().any(|a| a.len() > limits.max_bulk) {
        return err("invalid bulk length");
    }
    Ok(Some((args, nl + 1)))
}

/// Splits an inline command as Redis's `sdssplitargs` does: words
/// separated by spaces; double quotes with `\n`, `\t`, `\xHH`-style
/// escapes; single quotes with `\'` only. `None` for unbalanced quotes
/// or a closing quote not followed by a space.
pub fn split_args(text: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut i = 0;
    let n = text.len();
    loop {
        while i < n && text[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= n {
            return Some(out);
        }
        let mut cur = Vec::new();
        let (mut dq, mut sq) = (false, false);
        loop {
            if dq {
                let c = *text.get(i)?;
                if c == b'\\' && text.get(i + 1) == Some(&b'x') {
                    let hex = |b: u8| (b as char).to_digit(16);
                    match (
                        text.get(i + 2).copied().and_then(hex),
                        text.get(i + 3).copied().and_then(hex),
                    ) {
                        (Some(h), Some(l)) => {
                            cur.push((h * 16 + l) as u8);
                            i += 4;
                            continue;
                        }
                        _ => {
                            cur.push(b'\\');
                            i += 1;
                            continue;
                        }
                    }
                } else if c == b'\\' && i + 1 < n {
                    cur.push(match text[i + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                    i += 2;
                    continue;
                } else if c == b'"' {
                    // A closing quote must be followed by a space or the end.
                    if text.get(i + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                        return None;
                    }
                    dq = false;
                    i += 1;
                    break;
                }
                cur.push(c);
                i += 1;
            } else if sq {
                let c = *text.get(i)?;
                if c == b'\\' && text.get(i + 1) == Some(&b'\'') {
                    cur.push(b'\'');
                    i += 2;
                    continue;
                } else if c == b'\'' {
                    if text.get(i + 1).is_some_and(|b| !b.is_ascii_whitespace()) {
                        return None;
                    }
                    sq = false;
                    i += 1;
                    break;
                }
                cur.push(c);
                i += 1;
            } else {
                match text.get(i) {
                    None => break,
                    Some(c) if c.is_ascii_whitespace() => break,
                    Some(b'"') => dq = true,
                    Some(b'\'') => sq = true,
                    Some(&c) => cur.push(c),
                }
                i += 1;
            }
        }
        if dq || sq {
            return None;
        }
        out.push(cur);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn encode(args: &[Vec<u8>]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    fn one(buf: &[u8]) -> Result<Option<(OwnedArgs, usize)>, ProtocolError> {
        decode(buf, &Limits::default())
    }

    #[test]
    fn multibulk_and_inline_commands_decode() {
        let (args, used) = one(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((args, used), (vec![b"GET".to_vec(), b"k".to_vec()], 20));
        let (args, used) = one(b"set k \"a b\\n\" 'it\\'s'\r\n").unwrap().unwrap();
        assert_eq!(
            args,
            vec![
                b"set".to_vec(),
                b"k".to_vec(),
                b"a b\n".to_vec(),
                b"it's".to_vec()
            ]
        );
        assert_eq!(used, 23);
        assert_eq!(one(b"\r\n").unwrap().unwrap().0, Vec::<Vec<u8>>::new());
        assert_eq!(one(b"*0\r\n").unwrap().unwrap(), (Vec::new(), 4));
        assert_eq!(
            one(b"GET \"\\x41\\x4a\"\n").unwrap().unwrap().0[1],
            b"AJ".to_vec()
        );
    }

    #[test]
    fn garbage_gets_redis_errors() {
        let e = |b: &[u8]| one(b).unwrap_err().0;
        assert_eq!(e(b"*x\r\n"), "invalid multibulk length");
        assert_eq!(e(b"*1\r\n+OK\r\n"), "expected '$', got '+'");
        assert_eq!(e(b"*1\r\n$-5\r\n"), "invalid bulk length");
        assert_eq!(e(b"*1\r\n$3\r\nabcde"), "invalid bulk format");
        assert_eq!(e(b"GET \"k\n"), "unbalanced quotes in request");
        assert_eq!(e(b"GET \"k\"x\n"), "unbalanced quotes in request");
    }

    #[test]
    fn limits_are_checked_before_the_bytes_arrive() {
        let small = Limits {
            max_bulk: 10,
            max_args: 3,
            max_inline: 32,
        };
        // The header alone is enough to refuse.
        assert!(decode(b"*1\r\n$11\r\n", &small).is_err());
        assert!(decode(b"*4\r\n", &small).is_err());
        assert!(decode(&[b'a'; 40], &small).is_err());
        assert!(decode(b"*1\r\n$10\r\n0123", &small).unwrap().is_none());
    }

    proptest! {
        /// Any split of a stream of encoded commands decodes to the same
        /// commands, and every prefix of one is incomplete, never wrong.
        #[test]
        fn encoded_commands_round_trip(
            cmds in prop::collection::vec(prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6), 1..5),
        ) {
            let stream: Vec<u8> = cmds.iter().flat_map(|c| encode(c)).collect();
            let mut at = 0;
            for c in &cmds {
                let enc = encode(c);
                for cut in 0..enc.len() {
                    prop_assert_eq!(one(&stream[at..at + cut]).unwrap(), None);
                }
                let (args, used) = one(&stream[at..]).unwrap().unwrap();
                prop_assert_eq!(&args, c);
                prop_assert_eq!(used, enc.len());
                at += used;
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = one(&b);
        }
    }
}
