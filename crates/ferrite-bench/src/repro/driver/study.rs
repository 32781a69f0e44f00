//! [`Study`]: the shape every paper experiment takes. It measures into a
//! `Results` value, derives its figures from it (the claims' typed, the
//! rest by name), and renders its report from both; the driver ([`Driven`]) judges the claims, watches the disk
//! space of every store the run writes (`space`), saves the results as
//! `<out>/<experiment>/results.json` (and the space as `space.json`)
//! beside the report, and re-renders the report from them without
//! measuring again (`--rerender`).

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::space::{self, SpaceWatch, StoreSpace};
use super::{Metrics, Report};
use crate::error::{BenchError, Result};
use crate::repro::{
    ClaimFigures, ClaimSpec, Experiment, Outcome, ReproContext, SizeRow, SizeTable,
};

pub trait Study: Sync {
    /// Everything a run measured: what the metrics and the report are
    /// derived from.
    type Results: Serialize + DeserializeOwned;

    /// The experiment's name (`ferrite repro <NAME>`), and of its report.
    const NAME: &'static str;
    /// One line: what is compared with what.
    const SUMMARY: &'static str;
    /// The paper's claims and the figures they are judged on (a
    /// `claims!` struct, or [`NoClaims`](crate::repro::NoClaims)).
    type Claims: ClaimFigures;
    /// Its sizes at each scale (a `sizes!` table).
    type Sizes: SizeTable;
    /// Measures at sizes `s`, the table's at the run's scale.
    fn measure(&self, ctx: &ReproContext, s: Self::Sizes) -> Result<Self::Results>;
    /// The run's parameters other than its sizes (budgets, shapes,
    /// durability) for its JSON; the driver adds the sizes as `sizes`.
    fn params(&self, r: &Self::Results) -> serde_json::Value;
    /// Sets the claims' figures and returns every other figure, named.
    fn metrics(&self, r: &Self::Results, claims: &mut Self::Claims) -> Metrics;
    fn render(&self, r: &Self::Results, m: &Metrics, doc: &mut Report) -> Result<()>;
}

/// A [`Study`] as the registry's [`Experiment`].
pub struct Driven<S>(pub S);

impl<S: Study> Driven<S> {
    /// Every figure: the claims' under their names beside the others. A
    /// claim's name set as an ordinary figure would bypass its typed
    /// figure, so it is refused.
    fn metrics(&self, r: &S::Results) -> Result<Metrics> {
        let mut claims = S::Claims::default();
        let mut m = self.0.metrics(r, &mut claims);
        for f in claims.figures() {
            if m.get(f.name()).is_some() {
                return Err(BenchError::Config(format!(
                    "{}: claim figure {} was set by name, not through its field",
                    S::NAME,
                    f.name()
                )));
            }
            m.add(&f);
        }
        Ok(m)
    }

    fn publish(
        &self,
        ctx: &ReproContext,
        r: &S::Results,
        m: &Metrics,
        disk: &[StoreSpace],
    ) -> Result<()> {
        let Some(out) = &ctx.out_dir else {
            return Ok(());
        };
        let mut doc = Report::new(out, S::NAME)?;
        let json =
            serde_json::to_string_pretty(r).map_err(|e| BenchError::Config(e.to_string()))?;
        crate::report::write_file(&doc.dir().join("results.json"), &(json + "\n"))?;
        let json =
            serde_json::to_string_pretty(disk).map_err(|e| BenchError::Config(e.to_string()))?;
        crate::report::write_file(&doc.dir().join("space.json"), &(json + "\n"))?;
        self.0.render(r, m, &mut doc)?;
        space::section(&mut doc, disk);
        doc.finish()
    }
}

/// The experiment's `params` with its sizes beside them, under `sizes`.
fn with_sizes(params: serde_json::Value, sizes: &impl SizeTable) -> Result<serde_json::Value> {
    let sizes = serde_json::to_value(sizes).map_err(|e| BenchError::Config(e.to_string()))?;
    Ok(match params {
        serde_json::Value::Object(mut p) => {
            p.insert("sizes".into(), sizes);
            serde_json::Value::Object(p)
        }
        serde_json::Value::Null => serde_json::json!({ "sizes": sizes }),
        other => serde_json::json!({ "sizes": sizes, "params": other }),
    })
}

impl<S: Study> Experiment for Driven<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn summary(&self) -> &'static str {
        S::SUMMARY
    }

    fn claims(&self) -> Vec<ClaimSpec> {
        <S::Claims as ClaimFigures>::SPECS.to_vec()
    }

    fn sizes(&self) -> &'static [SizeRow] {
        S::Sizes::ROWS
    }

    fn run(&self, ctx: &ReproContext) -> Result<Outcome> {
        let sizes = S::Sizes::at(ctx.scale);
        let watch = SpaceWatch::start(&ctx.work_dir);
        let r = self.0.measure(ctx, sizes);
        let disk = watch.finish();
        let r = r?;
        let m = self.metrics(&r)?;
        self.publish(ctx, &r, &m, &disk)?;
        Ok(Outcome {
            params: with_sizes(self.0.params(&r), &sizes)?,
            metrics: m.into_map(),
            space: disk,
        })
    }

    fn rerender(&self, ctx: &ReproContext) -> Result<bool> {
        let Some(out) = &ctx.out_dir else {
            return Ok(false);
        };
        let path = out.join(S::NAME).join("results.json");
        let text = std::fs::read_to_string(&path).map_err(|e| BenchError::Data {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let r: S::Results = serde_json::from_str(&text).map_err(|e| BenchError::Data {
            path,
            reason: e.to_string(),
        })?;
        let m = self.metrics(&r)?;
        // Runs from before the driver watched disk space saved none.
        let disk: Vec<StoreSpace> = std::fs::read_to_string(out.join(S::NAME).join("space.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        self.publish(ctx, &r, &m, &disk)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    claims! {
        struct Claims {
            speedup >= 1.0, "a paper's figure";
        }
    }

    sizes! {
        struct Sizes {
            records: u64 = (10, 1_000, 100_000),
        }
    }

    /// Sets its claim's figure through the field, or, when `by_name`,
    /// by name beside it.
    struct Demo {
        by_name: bool,
    }

    impl Study for Demo {
        const NAME: &'static str = "demo";
        const SUMMARY: &'static str = "a demo";
        type Results = f64;
        type Sizes = Sizes;
        type Claims = Claims;

        fn measure(&self, _: &ReproContext, s: Sizes) -> Result<f64> {
            Ok(s.records as f64 / 5.0)
        }

        fn params(&self, _: &f64) -> serde_json::Value {
            serde_json::Value::Null
        }

        fn metrics(&self, r: &f64, c: &mut Claims) -> Metrics {
            let mut m = Metrics::new();
            m.set("speedup_detail", *r);
            if self.by_name {
                m.set("speedup", *r);
            } else {
                c.speedup.set(*r);
            }
            m
        }

        fn render(&self, _: &f64, _: &Metrics, _: &mut Report) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn claim_figures_join_the_metrics_and_may_not_be_set_by_name() {
        let m = Driven(Demo { by_name: false }).metrics(&2.0).unwrap();
        assert_eq!(m.get("speedup"), Some(2.0));
        assert_eq!(m.get("speedup_detail"), Some(2.0));
        let err = Driven(Demo { by_name: true }).metrics(&2.0).unwrap_err();
        assert!(err.to_string().contains("speedup"), "{err}");
    }

    #[test]
    fn the_driver_measures_at_the_scale_s_sizes_and_writes_them_to_the_params() {
        let work = tempfile::tempdir().unwrap();
        let ctx = ReproContext {
            scale: crate::repro::Scale::Smoke,
            out_dir: None,
            work_dir: work.path().to_path_buf(),
            data_dir: work.path().to_path_buf(),
            keys_dir: work.path().to_path_buf(),
            map_ops: Vec::new(),
            record_map_ops: None,
            compression: crate::adapter::Compression::default(),
            show_progress: false,
        };
        let outcome = Driven(Demo { by_name: false }).run(&ctx).unwrap();
        assert_eq!(
            outcome.metrics.get("speedup"),
            Some(&2.0),
            "smoke: 10 records"
        );
        assert_eq!(outcome.params["sizes"]["records"], 10);
        assert_eq!(
            Driven(Demo { by_name: false }).sizes()[0].at,
            ["10", "1_000", "100_000"]
        );
    }
}
