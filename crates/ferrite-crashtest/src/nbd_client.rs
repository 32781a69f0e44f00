//! A minimal NBD client for the crash test's volume runs: the fixed
//! newstyle handshake with `NBD_OPT_GO`, then one request at a time
//! (read, write with or without FUA, trim, flush) with simple replies.
//! The driver needs each request's acknowledgment as it happens, and TRIM
//! and FUA, which no maintained Rust NBD client offers; the wire format
//! is `ferrite_volume::nbd`'s. A server that dies shows as an
//! `std::io::Error`; anything else is the server misbehaving.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use ferrite_volume::nbd::{
    CMD_FLAG_FUA, IHAVEOPT, NBD_MAGIC, OPTION_REPLY_MAGIC, OPT_GO, REP_ACK, REQUEST_MAGIC,
    SIMPLE_REPLY_MAGIC,
};

const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_FLUSH: u16 = 3;
const CMD_TRIM: u16 = 4;
/// Client flags: fixed newstyle, no zeroes after the export data.
const CLIENT_FLAGS: u32 = 0b11;

pub struct NbdClient {
    s: TcpStream,
    cookie: u64,
}

impl NbdClient {
    /// Connects and negotiates the default export.
    pub fn connect(addr: SocketAddr) -> Result<Self> {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10))?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        s.set_nodelay(true)?;
        let mut hello = [0u8; 18];
        s.read_exact(&mut hello)?;
        if u64::from_be_bytes(hello[..8].try_into()?) != NBD_MAGIC {
            bail!("not an NBD server");
        }
        s.write_all(&CLIENT_FLAGS.to_be_bytes())?;
        // NBD_OPT_GO for the default export, no information requests.
        let mut opt = IHAVEOPT.to_be_bytes().to_vec();
        opt.extend_from_slice(&OPT_GO.to_be_bytes());
        opt.extend_from_slice(&6u32.to_be_bytes());
        opt.extend_from_slice(&0u32.to_be_bytes());
        opt.extend_from_slice(&0u16.to_be_bytes());
        s.write_all(&opt)?;
        loop {
            let mut h = [0u8; 20];
            s.read_exact(&mut h)?;
            if u64::from_be_bytes(h[..8].try_into()?) != OPTION_REPLY_MAGIC {
                bail!("bad option reply magic");
            }
            let kind = u32::from_be_bytes(h[12..16].try_into()?);
            let len = u32::from_be_bytes(h[16..20].try_into()?) as usize;
            let mut body = vec![0u8; len];
            s.read_exact(&mut body)?;
            if kind >= 1 << 31 {
                bail!("NBD_OPT_GO refused ({kind:#x})");
            }
            if kind == REP_ACK {
                return Ok(Self { s, cookie: 0 });
            }
        }
    }

    /// Sends one request and waits for its reply; `read` receives the
    /// data of a read.
    fn request(
        &mut self,
        cmd: u16,
        flags: u16,
        offset: u64,
        len: u32,
        payload: &[u8],
        read: Option<&mut [u8]>,
    ) -> Result<()> {
        self.cookie += 1;
        let mut b = Vec::with_capacity(28 + payload.len());
        b.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b.extend_from_slice(&flags.to_be_bytes());
        b.extend_from_slice(&cmd.to_be_bytes());
        b.extend_from_slice(&self.cookie.to_be_bytes());
        b.extend_from_slice(&offset.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(payload);
        self.s.write_all(&b)?;
        let mut h = [0u8; 16];
        self.s.read_exact(&mut h)?;
        if u32::from_be_bytes(h[..4].try_into()?) != SIMPLE_REPLY_MAGIC {
            bail!("bad reply magic");
        }
        let err = u32::from_be_bytes(h[4..8].try_into()?);
        if u64::from_be_bytes(h[8..16].try_into()?) != self.cookie {
            bail!("a reply to another request");
        }
        if err != 0 {
            // Not an I/O error: the server is alive and refused.
            bail!("the server answered error {err}");
        }
        if let Some(buf) = read {
            self.s.read_exact(buf).context("read data")?;
        }
        Ok(())
    }

    pub fn read(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let len = u32::try_from(buf.len())?;
        self.request(CMD_READ, 0, offset, len, &[], Some(buf))
    }

    pub fn write(&mut self, offset: u64, data: &[u8], fua: bool) -> Result<()> {
        let flags = if fua { CMD_FLAG_FUA } else { 0 };
        self.request(
            CMD_WRITE,
            flags,
            offset,
            u32::try_from(data.len())?,
            data,
            None,
        )
    }

    pub fn trim(&mut self, offset: u64, len: u64) -> Result<()> {
        self.request(CMD_TRIM, 0, offset, u32::try_from(len)?, &[], None)
    }

    pub fn flush(&mut self) -> Result<()> {
        self.request(CMD_FLUSH, 0, 0, 0, &[], None)
    }
}
