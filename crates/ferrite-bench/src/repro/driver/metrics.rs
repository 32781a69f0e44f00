//! [`Metrics`]: the named figures an experiment reports, which its claims
//! are judged on. Names are those the claims use; a figure measured per
//! data shape or workload goes in under `<name>_<label>`, and where a
//! claim takes the worst shape, the worst value also under `<name>`.

use std::collections::BTreeMap;

use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metrics(BTreeMap<String, f64>);

impl From<BTreeMap<String, f64>> for Metrics {
    fn from(m: BTreeMap<String, f64>) -> Self {
        Self(m)
    }
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    /// The numeric fields of a typed struct (nested maps flattened with
    /// `_`), for experiments whose figures are a fixed set.
    pub fn of<T: Serialize>(typed: &T) -> Self {
        let mut m = Self::new();
        if let Ok(v) = serde_json::to_value(typed) {
            m.flatten("", &v);
        }
        m
    }

    fn flatten(&mut self, prefix: &str, v: &serde_json::Value) {
        match v {
            serde_json::Value::Number(n) => {
                if let Some(x) = n.as_f64() {
                    self.0.insert(prefix.to_string(), x);
                }
            }
            serde_json::Value::Object(o) => {
                for (k, v) in o {
                    let name = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}_{k}")
                    };
                    self.flatten(&name, v);
                }
            }
            _ => {}
        }
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
    fn typed_figures_flatten_into_names() {
        #[derive(Serialize)]
        struct T {
            speedup: f64,
            per: BTreeMap<String, f64>,
            note: &'static str,
        }
        let t = T {
            speedup: 2.0,
            per: [("x".to_string(), 1.5)].into(),
            note: "skipped",
        };
        let m = Metrics::of(&t);
        assert_eq!(m.get("speedup"), Some(2.0));
        assert_eq!(m.get("per_x"), Some(1.5));
        assert_eq!(m.get("note"), None);
    }
}
