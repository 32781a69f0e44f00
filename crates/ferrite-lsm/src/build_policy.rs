//! Load-aware construction (SwiftKV §3.4): whether the tables a compaction
//! writes get a learned index, decided before they are written. A pure
//! policy over counters, tested without I/O.
//!
//! Every table counts the lookups that reached its index and knows when it
//! was made. When a compaction consumes tables, their lookup counts and
//! lifetimes feed their level's history, smoothed exponentially with
//! α = 0.25. For the new tables of level L the policy weighs the lookups
//! they can expect over their life against the cost of fitting them:
//!
//! `benefit = ((c / t + c_a / t_a) / 2) · t_a · save − t_train`
//!
//! where `c`, `t` are the consumed tables' mean lookups and lifetime, `c_a`,
//! `t_a` level L's smoothed ones, `save` the time a learned lookup saves
//! over a sparse one, and `t_train` the expected fitting time. A model is
//! built when `benefit > 0`. (The paper's formula combines the same six
//! quantities; its typesetting is lost in our copy, so this is the reading
//! that keeps the units: lookups × seconds saved per lookup − seconds.)
//! Before a level has any history its rate and lifetime are taken from the
//! consumed tables alone.

/// Smoothing factor of the per-level averages.
pub const ALPHA: f64 = 0.25;

/// A level's smoothed lookups per table and table lifetime.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LevelHistory {
    pub lookups: f64,
    pub lifetime_secs: f64,
    pub seen: bool,
}

impl LevelHistory {
    /// Folds in the mean lookups and lifetime of tables leaving the level.
    pub fn observe(&mut self, lookups: f64, lifetime_secs: f64) {
        if self.seen {
            self.lookups = ALPHA * lookups + (1.0 - ALPHA) * self.lookups;
            self.lifetime_secs = ALPHA * lifetime_secs + (1.0 - ALPHA) * self.lifetime_secs;
        } else {
            *self = Self {
                lookups,
                lifetime_secs,
                seen: true,
            };
        }
    }
}

/// What the policy knows about one compaction's inputs and outputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Mean lookups per consumed table (`c`).
    pub lookups: f64,
    /// Mean lifetime of the consumed tables, seconds (`t`).
    pub lifetime_secs: f64,
    /// Seconds a learned lookup saves over a sparse one (`save`).
    pub saving_secs: f64,
    /// Expected seconds to fit the new tables' models (`t_train`).
    pub training_secs: f64,
}

/// The expected benefit, in seconds, of learned indexes for the outputs.
pub fn benefit(c: &Candidate, level: &LevelHistory) -> f64 {
    let t = c.lifetime_secs.max(1e-3);
    let rate_in = c.lookups / t;
    let (rate_level, life) = if level.seen {
        let ta = level.lifetime_secs.max(1e-3);
        (level.lookups / ta, ta)
    } else {
        (rate_in, t)
    };
    (rate_in + rate_level) / 2.0 * life * c.saving_secs - c.training_secs
}

/// Whether the outputs get learned indexes.
pub fn should_learn(c: &Candidate, level: &LevelHistory) -> bool {
    benefit(c, level) > 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(lookups: f64, lifetime: f64) -> Candidate {
        Candidate {
            lookups,
            lifetime_secs: lifetime,
            saving_secs: 100e-9,
            training_secs: 0.01,
        }
    }

    #[test]
    fn read_tables_learn_and_unread_ones_do_not() {
        let fresh = LevelHistory::default();
        // 10⁶ lookups over a table's life save 0.1 s against 0.01 s of fitting.
        assert!(should_learn(&cand(1e6, 10.0), &fresh));
        // Never read: fitting is pure cost.
        assert!(!should_learn(&cand(0.0, 10.0), &fresh));
        // 5·10⁴ lookups save half of what fitting costs.
        assert!(!should_learn(&cand(5e4, 10.0), &fresh));
    }

    #[test]
    fn a_level_read_hot_carries_unread_inputs() {
        let mut level = LevelHistory::default();
        level.observe(4e6, 100.0);
        assert!(level.seen);
        // These inputs saw no lookups (a write burst), but the level's
        // tables are read at 40k/s over 100 s lives.
        assert!(should_learn(&cand(0.0, 1.0), &level));
    }

    #[test]
    fn history_is_smoothed_with_alpha() {
        let mut h = LevelHistory::default();
        h.observe(100.0, 10.0);
        h.observe(200.0, 30.0);
        assert!((h.lookups - 125.0).abs() < 1e-9);
        assert!((h.lifetime_secs - 15.0).abs() < 1e-9);
        // A level that went cold stops learning after a few compactions.
        let mut cold = LevelHistory::default();
        cold.observe(1e6, 10.0);
        for _ in 0..40 {
            cold.observe(0.0, 10.0);
        }
        assert!(!should_learn(&cand(0.0, 10.0), &cold));
    }
}
