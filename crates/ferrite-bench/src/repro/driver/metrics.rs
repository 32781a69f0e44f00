//! [`Metrics`]: the named figures an experiment reports, which its claims
//! are judged on. Names are those the claims use; a figure measured per
//! data shape or workload goes in under `<name>_<label>`, and where a
//! claim takes the worst shape, the worst value also under `<name>`.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics(BTreeMap<String, f64>);

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set(&mut self, name: impl Into<String>, v: f64) -> &mut Self {
        self.0.insert(name.into(), v);
        self
    }

    /// Sets `name` if there is a value.
    pub fn set_some(&mut self, name: impl Into<String>, v: Option<f64>) -> &mut Self {
        if let Some(v) = v {
            self.0.insert(name.into(), v);
        }
        self
    }

    /// Records `v` as `<name>_<label>`, and keeps the lowest value seen
    /// under `name` (for claims that must hold on every shape).
    pub fn lowest(&mut self, name: &str, label: &str, v: Option<f64>) {
        self.keep(name, label, v, f64::min);
    }

    /// As [`Metrics::lowest`], keeping the highest (for costs).
    pub fn highest(&mut self, name: &str, label: &str, v: Option<f64>) {
        self.keep(name, label, v, f64::max);
    }

    fn keep(&mut self, name: &str, label: &str, v: Option<f64>, pick: fn(f64, f64) -> f64) {
        if let Some(v) = v {
            self.0.insert(format!("{name}_{label}"), v);
            let e = self.0.entry(name.to_string()).or_insert(v);
            *e = pick(*e, v);
        }
    }

    /// Keeps the lowest value seen under `name`; NaN (not measured) is
    /// passed over.
    pub fn least(&mut self, name: &str, v: f64) {
        self.fold(name, v, f64::min);
    }

    /// As [`Metrics::least`], keeping the highest.
    pub fn most(&mut self, name: &str, v: f64) {
        self.fold(name, v, f64::max);
    }

    fn fold(&mut self, name: &str, v: f64, pick: fn(f64, f64) -> f64) {
        if v.is_nan() {
            return;
        }
        let e = self.0.entry(name.to_string()).or_insert(v);
        *e = pick(*e, v);
    }

    pub fn get(&self, name: &str) -> Option<f64> {
        self.0.get(name).copied()
    }

    /// The value of `name`, NaN if it was not measured (renders as "NaN").
    pub fn value(&self, name: &str) -> f64 {
        self.get(name).unwrap_or(f64::NAN)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &f64)> {
        self.0.iter()
    }

    pub fn into_map(self) -> BTreeMap<String, f64> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_shape_figures_keep_the_worst_under_the_bare_name() {
        let mut m = Metrics::new();
        m.lowest("ratio", "a", Some(1.2));
        m.lowest("ratio", "b", Some(0.9));
        m.lowest("ratio", "c", None);
        assert_eq!(m.get("ratio"), Some(0.9));
        assert_eq!(m.get("ratio_a"), Some(1.2));
        m.highest("cost", "a", Some(3.0));
        m.highest("cost", "b", Some(5.0));
        assert_eq!(m.get("cost"), Some(5.0));
    }

    #[test]
    fn a_running_worst_passes_over_figures_not_measured() {
        let mut m = Metrics::new();
        m.least("floor", f64::NAN);
        assert_eq!(m.get("floor"), None);
        m.least("floor", 2.0);
        m.least("floor", f64::NAN);
        m.least("floor", 1.5);
        assert_eq!(m.get("floor"), Some(1.5));
        m.most("ceiling", 0.4);
        m.most("ceiling", f64::NAN);
        m.most("ceiling", 0.7);
        assert_eq!(m.get("ceiling"), Some(0.7));
    }
}
