//! A store at rest holds one copy of its pages: the double-write file is
//! emptied once a checkpoint's meta page is in both slots, and the spill
//! file once a checkpoint has installed the pages spilled to it. The
//! store reopens with everything it held.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod common;

use std::collections::BTreeMap;

use common::Mode;
use ferrite_core::KvStore;
use ferrite_io::BlockDevice;

#[test]
fn the_double_write_and_spill_files_are_empty_after_each_checkpoint() {
    for mode in [Mode::Plain, Mode::Turbo, Mode::Shortcut] {
        let d = common::fresh();
        let db = common::open_as(&d, mode).unwrap();
        let mut model = BTreeMap::new();
        // Far more than the pool holds, so dirty pages are spilled.
        for i in 0..6000u32 {
            let k = format!("key{:08}", i.wrapping_mul(2_654_435_761) % 100_000).into_bytes();
            let v = vec![(i % 251) as u8; 150];
            db.put(&k, &v).unwrap();
            model.insert(k, v);
        }
        let spills = db.stats().field("spills").unwrap();
        assert!(spills > 0.0, "{mode:?}: no page was spilled");
        db.flush().unwrap();
        let (dwb, spill) = (d[1].len(), d[3].len());
        assert_eq!(
            (dwb, spill),
            (0, 0),
            "{mode:?}: double-write and spill bytes after a checkpoint"
        );
        drop(db);
        assert_eq!((d[1].len(), d[3].len()), (0, 0), "{mode:?}: at rest");

        let db = common::open_as(&d, mode).unwrap();
        assert_eq!(common::contents(&db), model, "{mode:?}");
        db.verify().unwrap();
    }
}
