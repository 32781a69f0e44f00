//! Seeds that are encoded messages: write batches (alone and as a
//! B+tree carry-over payload), store identities, volume superblocks, NBD
//! requests and option bodies, RESP commands, the server data model's
//! records, block-trace lines and recorded block-map operations.

use std::path::Path;

use ferrite_core::{EngineKind, StoreIdentity, WriteBatch};
use ferrite_server::model::{layout, Body, Coll, Kind, Listpack, Meta};
use ferrite_volume::{MapKind, Superblock};

use crate::Seeds;

pub fn all(data: Option<&Path>) -> Vec<Seeds> {
    vec![
        Seeds {
            target: "write_batch",
            inputs: batches().iter().map(encoded).collect(),
        },
        Seeds {
            target: "btree_carry_over",
            inputs: vec![carry_over(&batches()), carry_over(&[])],
        },
        Seeds {
            target: "store_identity",
            inputs: identities(),
        },
        Seeds {
            target: "volume_superblock",
            inputs: superblocks(),
        },
        Seeds {
            target: "nbd_request",
            inputs: nbd(),
        },
        Seeds {
            target: "resp_request",
            inputs: resp(),
        },
        Seeds {
            target: "server_records",
            inputs: server_records(),
        },
        Seeds {
            target: "replication_stream",
            inputs: replication_stream(),
        },
        Seeds {
            target: "block_trace",
            inputs: traces(data),
        },
        Seeds {
            target: "map_ops",
            inputs: map_ops(data),
        },
    ]
}

/// Recorded map operations (the records after the header, which the
/// target adds): the CloudPhysics trace's first requests as a volume's
/// map sees them, and a small stream of every kind.
fn map_ops(data: Option<&Path>) -> Vec<Vec<u8>> {
    use ferrite_trace::map_ops::encode;
    let records = |ops: &[ferrite_trace::RangeOp]| {
        let mut v = Vec::new();
        for op in ops {
            encode(op, &mut v);
        }
        v
    };
    let mut out = Vec::new();
    if let Some(dir) = data {
        let path = dir.join("traces").join("cloudphysics.csv");
        if let Ok(reqs) = ferrite_trace::parse_cloudphysics(&path) {
            let n = reqs.len().min(200);
            out.push(records(&ferrite_trace::ops_from_trace(&reqs[..n])));
        }
    }
    let reqs = ferrite_trace::parse_str(
        "fio",
        "fio version 2 iolog\n/dev/nbd0 add\n/dev/nbd0 open\n\
         /dev/nbd0 write 0 65536\n/dev/nbd0 read 4096 8192\n\
         /dev/nbd0 trim 8192 4096\n/dev/nbd0 close\n",
    )
    .unwrap_or_default();
    out.push(records(&ferrite_trace::ops_from_trace(&reqs)));
    out
}

fn batches() -> Vec<WriteBatch> {
    let mut out = Vec::new();
    let mut one = WriteBatch::new();
    let _ = one.put(b"key", b"value");
    out.push(one);
    let mut mixed = WriteBatch::new();
    let _ = mixed.put(b"a", &[1; 300]);
    let _ = mixed.delete(b"b");
    let _ = mixed.delete_range(b"c", b"d");
    let _ = mixed.put(b"", b"empty key");
    out.push(mixed);
    let mut many = WriteBatch::new();
    for i in 0..20u8 {
        let _ = many.put(&[b'k', i], &vec![i; usize::from(i) * 9]);
    }
    out.push(many);
    out
}

fn encoded(b: &WriteBatch) -> Vec<u8> {
    let mut v = Vec::new();
    b.encode(&mut v);
    v
}

/// A carry-over payload: a count, then each batch behind its length.
fn carry_over(batches: &[WriteBatch]) -> Vec<u8> {
    let mut v = (batches.len() as u32).to_le_bytes().to_vec();
    for b in batches {
        let enc = encoded(b);
        v.extend_from_slice(&(enc.len() as u32).to_le_bytes());
        v.extend_from_slice(&enc);
    }
    v
}

fn identities() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (i, kind) in EngineKind::ALL.iter().enumerate() {
        // The target builds and seals this one itself.
        out.push(vec![3, i as u8]);
        // A real identity file, taken as it is.
        let real = StoreIdentity::new(*kind, 1).encode();
        let mut input = vec![0];
        input.extend_from_slice(&real);
        out.push(input);
    }
    out
}

fn superblocks() -> Vec<Vec<u8>> {
    [(1u64 << 30, MapKind::Rask), (64 << 30, MapKind::PerBlock)]
        .into_iter()
        .filter_map(|(size, map)| Superblock::plan(size, 64 << 20, 0.2, map).ok())
        .map(|sb| sb.encode().to_vec())
        .collect()
}

/// Request headers of every command (read, write, disconnect, flush,
/// trim, write-zeroes, an unknown one) with and without FUA, and the
/// bodies of `NBD_OPT_GO` / `NBD_OPT_INFO`.
fn nbd() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (command, flags) in [
        (0u16, 0u16),
        (1, 0),
        (1, 1),
        (2, 0),
        (3, 0),
        (4, 0),
        (6, 2),
        (9, 0),
    ] {
        let mut r = 0x2560_9513u32.to_be_bytes().to_vec();
        r.extend_from_slice(&flags.to_be_bytes());
        r.extend_from_slice(&command.to_be_bytes());
        r.extend_from_slice(&(0x1234 + u64::from(command)).to_be_bytes());
        r.extend_from_slice(&(u64::from(command) * 4096).to_be_bytes());
        r.extend_from_slice(&65536u32.to_be_bytes());
        out.push(r);
    }
    for (name, items) in [(&b""[..], &[][..]), (b"ferrite", &[3u16, 1][..])] {
        let mut o = (name.len() as u32).to_be_bytes().to_vec();
        o.extend_from_slice(name);
        o.extend_from_slice(&(items.len() as u16).to_be_bytes());
        for i in items {
            o.extend_from_slice(&i.to_be_bytes());
        }
        out.push(o);
    }
    out
}

/// The server data model's records, each behind the byte that picks its
/// decoder: metadata of every type, with and without an expiry; an
/// expiry-index key; a dead collection's key; element keys.
/// A replication stream as a master sends it: a copy's records, its
/// end, changes (a string set with an expiry, a hash's fields, a flush
/// as range deletes), a heartbeat and a request for an acknowledgement;
/// and a change payload alone.
fn replication_stream() -> Vec<Vec<u8>> {
    use ferrite_server::model::Change;
    use ferrite_server::replication::frame::{encode, records, Kind as F};
    let meta = Meta {
        expire_at: Some(1_790_000_000_000),
        body: Body::String(b"value".to_vec()),
    };
    let mut set = Change {
        records: vec![
            (
                layout::server("version").to_vec(),
                Some(65_536u64.to_be_bytes().to_vec()),
            ),
            (
                [vec![0], b"session:42".to_vec()].concat(),
                Some(meta.encode()),
            ),
        ],
        touched: vec![(0, b"session:42".to_vec(), true)],
        ..Change::default()
    };
    set.keys_delta[0] = 1;
    set.volatile_delta[0] = 1;
    let mut hash = Change::default();
    if let Ok(k) = layout::field(0, 7, Kind::Hash, b"field") {
        hash.records.push((k, Some(b"v".to_vec())));
    }
    let mut flush = Change {
        ranges: vec![(vec![0], vec![1]), (vec![0x10, 0], vec![0x10, 1])],
        ..Change::default()
    };
    flush.keys_delta[0] = -2;
    let copy = records(&[
        (
            layout::server("format").to_vec(),
            b"ferrite-redis 2".to_vec(),
        ),
        (
            [vec![0], b"k".to_vec()].concat(),
            Meta::string(b"v".to_vec()).encode(),
        ),
    ]);
    let stream = [
        encode(F::Records, &copy),
        encode(F::CopyEnd, &[]),
        encode(F::Change, &set.encode()),
        encode(F::Change, &hash.encode()),
        encode(F::Heartbeat, &42u64.to_le_bytes()),
        encode(F::GetAck, &[]),
        encode(F::Change, &flush.encode()),
    ];
    vec![stream.concat(), set.encode(), stream[0].clone()]
}

fn server_records() -> Vec<Vec<u8>> {
    let tagged = |tag: u8, record: Vec<u8>| [vec![tag], record].concat();
    let coll = |kind, head, packed| {
        Body::Coll(Coll {
            kind,
            version: 7,
            size: 3,
            head,
            packed,
        })
    };
    let mut out = Vec::new();
    for expire_at in [None, Some(1_790_000_000_000)] {
        for body in [
            Body::String(b"value".to_vec()),
            Body::Int(-42),
            Body::PackedHash(Listpack::of([&b"field"[..], b"value", b"n", b"300"])),
            coll(Kind::Hash, 0, false),
            coll(Kind::Set, 0, false),
            coll(Kind::ZSet, 0, false),
            coll(Kind::List, 1 << 62, false),
            coll(Kind::List, 1 << 62, true),
        ] {
            out.push(tagged(0, Meta { expire_at, body }.encode()));
        }
    }
    out.push(tagged(
        1,
        layout::expiry(1_790_000_000_000, 0, b"session:42"),
    ));
    out.push(tagged(2, layout::trash(3, 7)));
    if let Ok(k) = layout::score(0, 7, 2.5, b"member") {
        out.push(tagged(3, k));
    }
    if let Ok(k) = layout::field(0, 7, Kind::Hash, b"field") {
        out.push(tagged(3, k));
    }
    out.push(tagged(3, layout::item(0, 7, 1 << 62)));
    out
}

fn resp() -> Vec<Vec<u8>> {
    let array = |args: &[&[u8]]| {
        let mut v = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            v.extend_from_slice(a);
            v.extend_from_slice(b"\r\n");
        }
        v
    };
    vec![
        array(&[b"PING"]),
        array(&[b"SET", b"key", b"value", b"EX", b"10"]),
        array(&[b"GET", b"key"]),
        array(&[b"MSET", b"a", b"1", b"b", b"2"]),
        array(&[b"HELLO", b"3"]),
        [
            array(&[b"MULTI"]),
            array(&[b"INCR", b"n"]),
            array(&[b"EXEC"]),
        ]
        .concat(),
        b"PING\r\nSET k v\r\nGET k\r\n".to_vec(),
        b"*0\r\n*-1\r\n$3\r\n".to_vec(),
    ]
}

/// The first lines of each shared trace (prefixed by its format's index
/// in `ferrite_trace::FORMATS`), and an fio iolog.
fn traces(data: Option<&Path>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    if let Some(dir) = data {
        for (pick, file) in [(0u8, "cloudphysics.csv"), (1, "tectonic_chunks_1.csv")] {
            if let Ok(text) = std::fs::read_to_string(dir.join("traces").join(file)) {
                let head: Vec<&str> = text.lines().take(40).collect();
                out.push([&[pick][..], head.join("\n").as_bytes()].concat());
            }
        }
    }
    let iolog = "fio version 2 iolog\n/dev/nbd0 add\n/dev/nbd0 open\n\
                 /dev/nbd0 write 0 4096\n/dev/nbd0 read 8192 65536\n\
                 /dev/nbd0 trim 4096 4096\n/dev/nbd0 sync 0 0\n/dev/nbd0 close\n";
    out.push([&[2u8][..], iolog.as_bytes()].concat());
    out
}
