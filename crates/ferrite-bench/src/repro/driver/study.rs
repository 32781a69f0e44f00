//! [`Study`]: the shape every paper experiment takes. It measures into a
//! `Results` value, derives its metrics from it, and renders its report
//! from both; the driver ([`Driven`]) judges the claims, watches the disk
//! space of every store the run writes (`space`), saves the results as
//! `<out>/<experiment>/results.json` (and the space as `space.json`)
//! beside the report, and re-renders the report from them without
//! measuring again (`--rerender`).

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::space::{self, SpaceWatch, StoreSpace};
use super::{Metrics, Report};
use crate::error::{BenchError, Result};
use crate::repro::{ClaimSpec, Experiment, Outcome, ReproContext, SizeRow};

pub trait Study: Sync {
    /// Everything a run measured: what the metrics and the report are
    /// derived from.
    type Results: Serialize + DeserializeOwned;

    /// The experiment's name (`ferrite repro <NAME>`), and of its report.
    const NAME: &'static str;
    /// One line: what is compared with what.
    const SUMMARY: &'static str;
    /// The paper's claims, as targets on [`Study::metrics`].
    const CLAIMS: &'static [ClaimSpec];
    /// Its sizes at each scale (a `sizes!` table's `ROWS`).
    const SIZES: &'static [SizeRow];
    fn measure(&self, ctx: &ReproContext) -> Result<Self::Results>;
    /// The run's parameters (sizes, budgets, durability) for its JSON.
    fn params(&self, r: &Self::Results) -> serde_json::Value;
    fn metrics(&self, r: &Self::Results) -> Metrics;
    fn render(&self, r: &Self::Results, m: &Metrics, doc: &mut Report) -> Result<()>;
}

/// A [`Study`] as the registry's [`Experiment`].
pub struct Driven<S>(pub S);

impl<S: Study> Driven<S> {
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

impl<S: Study> Experiment for Driven<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn summary(&self) -> &'static str {
        S::SUMMARY
    }

    fn claims(&self) -> Vec<ClaimSpec> {
        S::CLAIMS.to_vec()
    }

    fn sizes(&self) -> &'static [SizeRow] {
        S::SIZES
    }

    fn run(&self, ctx: &ReproContext) -> Result<Outcome> {
        let watch = SpaceWatch::start(&ctx.work_dir);
        let r = self.0.measure(ctx);
        let disk = watch.finish();
        let r = r?;
        let m = self.0.metrics(&r);
        self.publish(ctx, &r, &m, &disk)?;
        Ok(Outcome {
            params: self.0.params(&r),
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
        let m = self.0.metrics(&r);
        // Runs from before the driver watched disk space saved none.
        let disk: Vec<StoreSpace> = std::fs::read_to_string(out.join(S::NAME).join("space.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        self.publish(ctx, &r, &m, &disk)?;
        Ok(true)
    }
}
