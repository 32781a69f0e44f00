//! An experiment's figures. Each claim's is a typed [`Figure`], a field of
//! the experiment's `claims!` struct, so a claim and the code that
//! measures it cannot disagree on a name. Every other figure goes into
//! [`Metrics`] by name; one measured per data shape or workload goes in
//! under `<name>_<label>`, and where a claim takes the worst shape, its
//! figure keeps the worst ([`Metrics::lowest`]). The driver adds the
//! claims' figures to the [`Metrics`] under their names, and refuses a
//! claim's name set there directly.

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

    /// Records `v` as `<figure>_<label>`, and keeps the lowest value seen
    /// in `figure` (for claims that must hold on every shape).
    pub fn lowest(&mut self, figure: &mut Figure, label: &str, v: Option<f64>) {
        self.keep(figure, label, v, f64::min);
    }

    /// As [`Metrics::lowest`], keeping the highest (for costs).
    pub fn highest(&mut self, figure: &mut Figure, label: &str, v: Option<f64>) {
        self.keep(figure, label, v, f64::max);
    }

    fn keep(
        &mut self,
        figure: &mut Figure,
        label: &str,
        v: Option<f64>,
        pick: fn(f64, f64) -> f64,
    ) {
        if let Some(v) = v {
            self.0.insert(format!("{}_{label}", figure.name), v);
            figure.value = Some(figure.value.map_or(v, |e| pick(e, v)));
        }
    }

    /// Adds `figure` under its name if it was measured (a claim's, or a
    /// running worst no claim judges).
    pub fn add(&mut self, figure: &Figure) -> &mut Self {
        self.set_some(figure.name, figure.value)
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

/// One claim's figure: the metric's name, and its value once measured.
/// Made for each claim by `claims!`; the driver adds the measured ones to
/// the experiment's [`Metrics`] under their names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figure {
    name: &'static str,
    value: Option<f64>,
}

impl Figure {
    pub const fn named(name: &'static str) -> Self {
        Self { name, value: None }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The value, `None` if not measured.
    pub fn value(&self) -> Option<f64> {
        self.value
    }

    pub fn set(&mut self, v: f64) {
        self.value = Some(v);
    }

    /// Sets the value if there is one.
    pub fn set_some(&mut self, v: Option<f64>) {
        if v.is_some() {
            self.value = v;
        }
    }

    /// Keeps the lowest value seen; NaN (not measured) is passed over.
    pub fn least(&mut self, v: f64) {
        self.fold(v, f64::min);
    }

    /// As [`Figure::least`], keeping the highest.
    pub fn most(&mut self, v: f64) {
        self.fold(v, f64::max);
    }

    fn fold(&mut self, v: f64, pick: fn(f64, f64) -> f64) {
        if !v.is_nan() {
            self.value = Some(self.value.map_or(v, |e| pick(e, v)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_shape_figures_keep_the_worst_in_the_figure() {
        let mut m = Metrics::new();
        let mut ratio = Figure::named("ratio");
        m.lowest(&mut ratio, "a", Some(1.2));
        m.lowest(&mut ratio, "b", Some(0.9));
        m.lowest(&mut ratio, "c", None);
        assert_eq!(ratio.value(), Some(0.9));
        assert_eq!(m.get("ratio_a"), Some(1.2));
        assert_eq!(
            m.get("ratio"),
            None,
            "the worst is the figure's, not a detail"
        );
        let mut cost = Figure::named("cost");
        m.highest(&mut cost, "a", Some(3.0));
        m.highest(&mut cost, "b", Some(5.0));
        assert_eq!(cost.value(), Some(5.0));
    }

    #[test]
    fn a_running_worst_passes_over_figures_not_measured() {
        let mut floor = Figure::named("floor");
        floor.least(f64::NAN);
        assert_eq!(floor.value(), None);
        floor.least(2.0);
        floor.least(f64::NAN);
        floor.least(1.5);
        assert_eq!(floor.value(), Some(1.5));
        let mut ceiling = Figure::named("ceiling");
        ceiling.most(0.4);
        ceiling.most(f64::NAN);
        ceiling.most(0.7);
        assert_eq!(ceiling.value(), Some(0.7));
        ceiling.set_some(None);
        assert_eq!(ceiling.value(), Some(0.7));
    }
}
