//! What a store must hold after a crash, given what the worker
//! acknowledged. Pure: no I/O.
//!
//! The worker runs the operations of its stream one at a time. Operation
//! `i` is *started* before it runs and *durable* once acknowledged in
//! `always` mode, or once a `sync` that followed it returned in batched
//! mode. A crash may lose only a suffix of the started operations, never
//! a durable one, never part of a batch: the recovered store must equal
//! the expected state after operations `0..=j` for some `j` between the
//! last durable operation and the last started one.
//!
//! What readers were shown while the worker ran must survive too: a
//! value a reader saw is one its key held at some point of the recovered
//! history (then or before a later write that also survived), never one
//! only a lost operation made.

use std::collections::{BTreeMap, BTreeSet};

use crate::ops::Op;

pub type State = BTreeMap<Vec<u8>, Vec<u8>>;

/// Applies a write to `state` (reads change nothing).
pub fn apply(state: &mut State, op: &Op) {
    match op {
        Op::Put(k, v) => {
            state.insert(k.clone(), v.clone());
        }
        Op::Delete(k) => {
            state.remove(k);
        }
        Op::Batch(items) => {
            for (k, v) in items {
                match v {
                    Some(v) => state.insert(k.clone(), v.clone()),
                    None => state.remove(k),
                };
            }
        }
        Op::DeleteRange(a, b) => {
            let doomed: Vec<Vec<u8>> = state
                .range(a.clone()..b.clone())
                .map(|(k, _)| k.clone())
                .collect();
            for k in doomed {
                state.remove(&k);
            }
        }
        Op::Get(_) => {}
    }
}

/// A recovered store that matches no allowed state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The first key that differs from the nearest allowed state, with
    /// what the store held and what it should have.
    pub key: Vec<u8>,
    pub found: Option<Vec<u8>>,
    pub expected: Option<Vec<u8>>,
    pub durable: usize,
    pub started: usize,
}

/// Finds which prefix of `ops` the recovered `found` state is, given the
/// state before them: `durable` ops (0-based count) must be in, at most
/// `started` may be. Returns the count applied, or why none fits.
pub fn recovered_prefix(
    before: &State,
    ops: &[Op],
    durable: usize,
    started: usize,
    found: &State,
) -> Result<usize, Violation> {
    let mut state = before.clone();
    for op in &ops[..durable] {
        apply(&mut state, op);
    }
    // Keys any started but not durable operation may have changed.
    let mut uncertain: BTreeSet<Vec<u8>> = BTreeSet::new();
    let mut probe = state.clone();
    for op in &ops[durable..started] {
        match op {
            Op::Put(k, _) | Op::Delete(k) => {
                uncertain.insert(k.clone());
            }
            Op::Batch(items) => uncertain.extend(items.iter().map(|(k, _)| k.clone())),
            Op::DeleteRange(a, b) => {
                uncertain.extend(probe.range(a.clone()..b.clone()).map(|(k, _)| k.clone()));
            }
            Op::Get(_) => {}
        }
        apply(&mut probe, op);
    }
    let violation = |k: &Vec<u8>, state: &State| Violation {
        key: k.clone(),
        found: found.get(k).cloned(),
        expected: state.get(k).cloned(),
        durable,
        started,
    };
    // Outside the uncertain keys the store must equal the durable state.
    let keys: BTreeSet<&Vec<u8>> = state.keys().chain(found.keys()).collect();
    for k in keys {
        if !uncertain.contains(k) && state.get(k) != found.get(k) {
            return Err(violation(k, &state));
        }
    }
    let matches = |s: &State| uncertain.iter().all(|k| s.get(k) == found.get(k));
    let mut first_diff = None;
    for j in durable..=started {
        if matches(&state) {
            return Ok(j);
        }
        if first_diff.is_none() {
            first_diff = uncertain
                .iter()
                .find(|k| state.get(*k) != found.get(*k))
                .cloned();
        }
        if let Some(op) = ops.get(j).filter(|_| j < started) {
            apply(&mut state, op);
        }
    }
    let k = first_diff.unwrap_or_default();
    let mut at_durable = before.clone();
    for op in &ops[..durable] {
        apply(&mut at_durable, op);
    }
    Err(violation(&k, &at_durable))
}

/// What a reader was shown for a key: its value, or that it had none.
pub type Shown = (Vec<u8>, Option<Vec<u8>>);

/// A value a reader was shown that the recovered history never held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unseen {
    pub key: Vec<u8>,
    pub shown: Option<Vec<u8>>,
    /// The operations the recovered state can be the result of, at most.
    pub recovered: usize,
}

/// The longest prefix of `ops[..started]` (at least `from`) whose state
/// equals `found`: when several prefixes give the same state, the
/// recovered history is the longest one that may have happened.
pub fn longest_prefix(
    before: &State,
    ops: &[Op],
    from: usize,
    started: usize,
    found: &State,
) -> usize {
    let mut state = before.clone();
    let mut best = from;
    for (j, op) in ops[..started].iter().enumerate() {
        apply(&mut state, op);
        if j + 1 >= from && state == *found {
            best = j + 1;
        }
    }
    best
}

/// Checks what readers were shown against the recovered history: the
/// state `before` and after each of `ops[..recovered]`.
pub fn check_shown(
    before: &State,
    ops: &[Op],
    recovered: usize,
    shown: &[Shown],
) -> Result<(), Unseen> {
    // Every (key, value-or-none) the history held.
    let mut held: BTreeSet<(Vec<u8>, Option<Vec<u8>>)> = BTreeSet::new();
    let asked: BTreeSet<&Vec<u8>> = shown.iter().map(|(k, _)| k).collect();
    let mut state = before.clone();
    let note = |state: &State, held: &mut BTreeSet<_>| {
        for k in &asked {
            held.insert(((*k).clone(), state.get(*k).cloned()));
        }
    };
    note(&state, &mut held);
    for op in &ops[..recovered] {
        apply(&mut state, op);
        note(&state, &mut held);
    }
    match shown.iter().find(|s| !held.contains(*s)) {
        None => Ok(()),
        Some((k, v)) => Err(Unseen {
            key: k.clone(),
            shown: v.clone(),
            recovered,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: &str, v: &str) -> (Vec<u8>, Vec<u8>) {
        (k.as_bytes().to_vec(), v.as_bytes().to_vec())
    }

    fn put(k: &str, v: &str) -> Op {
        let (k, v) = kv(k, v);
        Op::Put(k, v)
    }

    #[test]
    fn a_lost_suffix_is_allowed_and_a_lost_durable_write_is_not() {
        let before: State = [kv("a", "0")].into_iter().collect();
        let ops = vec![
            put("a", "1"),
            Op::Batch(vec![
                (b"b".to_vec(), Some(b"2".to_vec())),
                (b"a".to_vec(), None),
            ]),
            put("c", "3"),
        ];
        let state =
            |pairs: &[(&str, &str)]| -> State { pairs.iter().map(|(k, v)| kv(k, v)).collect() };
        // Everything started made it, or the last op was lost.
        assert_eq!(
            recovered_prefix(&before, &ops, 1, 3, &state(&[("b", "2"), ("c", "3")])),
            Ok(3)
        );
        assert_eq!(
            recovered_prefix(&before, &ops, 1, 3, &state(&[("b", "2")])),
            Ok(2)
        );
        assert_eq!(
            recovered_prefix(&before, &ops, 1, 3, &state(&[("a", "1")])),
            Ok(1)
        );
        // Half a batch is never allowed.
        assert!(recovered_prefix(&before, &ops, 1, 3, &state(&[("a", "1"), ("b", "2")])).is_err());
        // A durable write must be there.
        assert!(recovered_prefix(&before, &ops, 2, 3, &state(&[("a", "1")])).is_err());
        // A key no op touched must keep its value.
        assert!(recovered_prefix(&before, &ops, 0, 0, &state(&[("a", "9")])).is_err());
    }

    #[test]
    fn a_shown_value_must_be_in_the_recovered_history() {
        let before: State = [kv("a", "0")].into_iter().collect();
        let ops = vec![put("a", "1"), put("b", "2"), Op::Delete(b"a".to_vec())];
        let shown =
            |k: &str, v: Option<&str>| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec()));
        // Before the run, or superseded by a write that survived.
        assert!(check_shown(
            &before,
            &ops,
            2,
            &[shown("a", Some("0")), shown("a", Some("1"))]
        )
        .is_ok());
        assert!(check_shown(&before, &ops, 2, &[shown("b", None), shown("b", Some("2"))]).is_ok());
        // Made only by an operation the crash took back.
        assert_eq!(
            check_shown(&before, &ops, 1, &[shown("b", Some("2"))])
                .unwrap_err()
                .key,
            b"b".to_vec()
        );
        assert!(check_shown(&before, &ops, 2, &[shown("a", None)]).is_err());
        assert!(check_shown(&before, &ops, 3, &[shown("a", None)]).is_ok());
        // A value no operation wrote.
        assert!(check_shown(&before, &ops, 3, &[shown("a", Some("9"))]).is_err());
        // The longest prefix giving the recovered state counts.
        let twice = vec![put("a", "1"), put("a", "0")];
        assert_eq!(longest_prefix(&before, &twice, 0, 2, &before), 2);
        assert_eq!(longest_prefix(&before, &twice, 0, 1, &before), 0);
    }

    #[test]
    fn range_deletes_count_as_one_operation() {
        let before: State = [kv("k1", "x"), kv("k2", "y"), kv("k9", "z")]
            .into_iter()
            .collect();
        let ops = vec![Op::DeleteRange(b"k0".to_vec(), b"k5".to_vec())];
        let after: State = [kv("k9", "z")].into_iter().collect();
        assert_eq!(recovered_prefix(&before, &ops, 0, 1, &after), Ok(1));
        assert_eq!(recovered_prefix(&before, &ops, 0, 1, &before), Ok(0));
        let half: State = [kv("k2", "y"), kv("k9", "z")].into_iter().collect();
        assert!(recovered_prefix(&before, &ops, 0, 1, &half).is_err());
    }
}
