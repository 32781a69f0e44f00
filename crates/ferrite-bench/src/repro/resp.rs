//! A minimal RESP client for the server experiments: one connection,
//! requests encoded as arrays of bulk strings, replies read one at a time
//! (statuses, integers and bulks; an error reply is an error). Enough for
//! INFO, DBSIZE, SET, GET and pipelined loading; the throughput runs use
//! `redis-benchmark`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::error::{BenchError, Result};

/// A minimal RESP connection for INFO, SET, GET and bulk loading.
pub(super) struct Resp {
    pub(super) w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Resp {
    pub(super) fn connect(port: u16) -> Result<Self> {
        let w = TcpStream::connect(("127.0.0.1", port)).map_err(io)?;
        w.set_nodelay(true).map_err(io)?;
        w.set_read_timeout(Some(Duration::from_secs(600)))
            .map_err(io)?;
        let r = BufReader::new(w.try_clone().map_err(io)?);
        Ok(Self { w, r })
    }

    pub(super) fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
        out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
    }

    /// One reply: a status or bulk as bytes, `None` for nil; an error
    /// reply is an error.
    pub(super) fn reply(&mut self) -> Result<Option<Vec<u8>>> {
        let mut line = String::new();
        self.r.read_line(&mut line).map_err(io)?;
        let line = line.trim_end();
        match line.as_bytes().first() {
            Some(b'+') | Some(b':') => Ok(Some(line.as_bytes()[1..].to_vec())),
            Some(b'$') => {
                let n: i64 = line[1..]
                    .parse()
                    .map_err(|_| BenchError::Config(format!("bad reply {line}")))?;
                if n < 0 {
                    return Ok(None);
                }
                let mut b = vec![0u8; n as usize + 2];
                self.r.read_exact(&mut b).map_err(io)?;
                b.truncate(n as usize);
                Ok(Some(b))
            }
            _ => Err(BenchError::Config(format!("unexpected reply {line:?}"))),
        }
    }

    pub(super) fn call(&mut self, args: &[&[u8]]) -> Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Self::encode(&mut out, args);
        self.w.write_all(&out).map_err(io)?;
        self.reply()
    }
}

fn io(e: std::io::Error) -> BenchError {
    BenchError::Config(format!("RESP client: {e}"))
}
