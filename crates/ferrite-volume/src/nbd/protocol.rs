//! The NBD wire format: magics, option and command numbers, flags, and
//! decoders for the two things a client sends that carry structure (a
//! transmission request header and an `NBD_OPT_INFO`/`GO` body). The
//! decoders never panic on any bytes (a fuzz target checks it).
//!
//! Numbers are big-endian on the wire, as the protocol defines.

/// "NBDMAGIC": the first eight bytes a server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": newstyle negotiation, and the prefix of every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const CLIENT_FLAGS_KNOWN: u32 = (FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES) as u32;

pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;

pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;

pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;

pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;

/// Bytes of a request header.
pub const REQUEST_LEN: usize = 28;
/// Longest option body the server reads (an export name fits easily).
pub const MAX_OPTION_LEN: u32 = 64 << 10;

/// A transmission-phase command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Read,
    Write,
    Disconnect,
    Flush,
    Trim,
    WriteZeroes,
    /// A command the server does not offer (`NBD_CMD_CACHE`,
    /// `BLOCK_STATUS`, `RESIZE`, or a number it does not know).
    Other(u16),
}

impl Command {
    fn from_wire(t: u16) -> Self {
        match t {
            0 => Command::Read,
            1 => Command::Write,
            2 => Command::Disconnect,
            3 => Command::Flush,
            4 => Command::Trim,
            6 => Command::WriteZeroes,
            t => Command::Other(t),
        }
    }
}

/// A decoded request header (a write's payload follows it on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub command: Command,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

impl Request {
    pub fn fua(&self) -> bool {
        self.flags & CMD_FLAG_FUA != 0
    }

    pub fn no_hole(&self) -> bool {
        self.flags & CMD_FLAG_NO_HOLE != 0
    }
}

/// Why the bytes a client sent cannot be a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("bad request magic {0:#010x}")]
    BadMagic(u32),
    #[error("message of {got} bytes, need {need}")]
    Short { got: usize, need: usize },
    #[error("malformed option: {0}")]
    BadOption(&'static str),
}

fn be_u16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn be_u32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be_u64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Decodes a request header.
pub fn decode_request(b: &[u8]) -> Result<Request, ProtocolError> {
    let short = ProtocolError::Short {
        got: b.len(),
        need: REQUEST_LEN,
    };
    let magic = be_u32(b, 0).ok_or(short.clone())?;
    if magic != REQUEST_MAGIC {
        return Err(ProtocolError::BadMagic(magic));
    }
    if b.len() < REQUEST_LEN {
        return Err(short);
    }
    Ok(Request {
        flags: be_u16(b, 4).unwrap_or_default(),
        command: Command::from_wire(be_u16(b, 6).unwrap_or_default()),
        cookie: be_u64(b, 8).unwrap_or_default(),
        offset: be_u64(b, 16).unwrap_or_default(),
        length: be_u32(b, 24).unwrap_or_default(),
    })
}

/// The body of `NBD_OPT_INFO` / `NBD_OPT_GO`: an export name and the
/// information items the client asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    pub name: Vec<u8>,
    pub items: Vec<u16>,
}

pub fn parse_info_request(b: &[u8]) -> Result<InfoRequest, ProtocolError> {
    let name_len = be_u32(b, 0).ok_or(ProtocolError::BadOption("no name length"))? as usize;
    let name = b
        .get(4..4usize.saturating_add(name_len))
        .ok_or(ProtocolError::BadOption("name longer than the option"))?
        .to_vec();
    let at = 4 + name_len;
    let n = be_u16(b, at).ok_or(ProtocolError::BadOption("no item count"))? as usize;
    if b.len() != at + 2 + 2 * n {
        return Err(ProtocolError::BadOption(
            "item count disagrees with the length",
        ));
    }
    let items = (0..n)
        .map(|i| be_u16(b, at + 2 + 2 * i).unwrap_or(u16::MAX))
        .collect();
    Ok(InfoRequest { name, items })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header(flags: u16, cmd: u16, cookie: u64, offset: u64, len: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b.extend_from_slice(&flags.to_be_bytes());
        b.extend_from_slice(&cmd.to_be_bytes());
        b.extend_from_slice(&cookie.to_be_bytes());
        b.extend_from_slice(&offset.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b
    }

    #[test]
    fn requests_decode_and_garbage_is_refused() {
        let r = decode_request(&header(1, 1, 7, 4096, 512)).unwrap();
        assert_eq!(r.command, Command::Write);
        assert!(r.fua());
        assert_eq!((r.cookie, r.offset, r.length), (7, 4096, 512));
        assert_eq!(
            decode_request(&header(0, 5, 0, 0, 0)).unwrap().command,
            Command::Other(5)
        );
        let mut bad = header(0, 0, 0, 0, 0);
        bad[0] ^= 1;
        assert!(matches!(
            decode_request(&bad),
            Err(ProtocolError::BadMagic(_))
        ));
        assert!(matches!(
            decode_request(&header(0, 0, 0, 0, 0)[..20]),
            Err(ProtocolError::Short { .. })
        ));
    }

    #[test]
    fn info_requests_parse_and_lies_are_refused() {
        let mut b = Vec::new();
        b.extend_from_slice(&3u32.to_be_bytes());
        b.extend_from_slice(b"vol");
        b.extend_from_slice(&2u16.to_be_bytes());
        b.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        b.extend_from_slice(&INFO_NAME.to_be_bytes());
        let r = parse_info_request(&b).unwrap();
        assert_eq!(r.name, b"vol");
        assert_eq!(r.items, vec![INFO_BLOCK_SIZE, INFO_NAME]);
        assert!(parse_info_request(&b[..b.len() - 1]).is_err());
        let mut lie = b.clone();
        lie[3] = 200;
        assert!(parse_info_request(&lie).is_err());
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_request(&bytes);
            let _ = parse_info_request(&bytes);
        }
    }
}
