//! [`Report`]: an experiment's Markdown document and the figures beside
//! it: `<out>/<experiment>.md`, with plots (and the saved results) in
//! `<out>/<experiment>/`, linked relatively so the document reads the
//! same wherever `<out>` is.

use std::fmt::{self, Display, Write as _};
use std::path::{Path, PathBuf};

use super::Metrics;
use crate::error::{BenchError, Result};

pub struct Report {
    name: String,
    out: PathBuf,
    md: String,
}

impl Report {
    /// A report for experiment `name` in `out`, with its figure directory
    /// created.
    pub fn new(out: &Path, name: &str) -> Result<Self> {
        let dir = out.join(name);
        std::fs::create_dir_all(&dir).map_err(|source| BenchError::Output {
            path: dir.clone(),
            source,
        })?;
        Ok(Self {
            name: name.to_string(),
            out: out.to_path_buf(),
            md: String::new(),
        })
    }

    /// The directory figures and saved results go to.
    pub fn dir(&self) -> PathBuf {
        self.out.join(&self.name)
    }

    /// A paragraph (or any Markdown block), followed by a blank line.
    pub fn text(&mut self, s: impl AsRef<str>) -> &mut Self {
        self.md.push_str(s.as_ref().trim_end());
        self.md.push_str("\n\n");
        self
    }

    pub fn h1(&mut self, s: impl Display) -> &mut Self {
        self.text(format!("# {s}"))
    }

    pub fn h2(&mut self, s: impl Display) -> &mut Self {
        self.text(format!("## {s}"))
    }

    pub fn table(&mut self, t: &Table) -> &mut Self {
        self.text(t.to_string())
    }

    /// Links figure `file` (drawn into the returned path) under `alt`.
    pub fn figure(&mut self, file: &str, alt: &str) -> PathBuf {
        let _ = writeln!(self.md, "![{alt}]({}/{file})\n", self.name);
        self.dir().join(file)
    }

    /// Every metric, as a list.
    pub fn metrics(&mut self, m: &Metrics) -> &mut Self {
        self.h2("Metrics");
        for (k, v) in m.iter() {
            let _ = writeln!(self.md, "- `{k}`: {v:.4}");
        }
        self.md.push('\n');
        self
    }

    /// Writes `<out>/<name>.md`.
    pub fn finish(self) -> Result<()> {
        let text = self.md.trim_end().to_string() + "\n";
        crate::report::write_file(&self.out.join(format!("{}.md", self.name)), &text)
    }
}

impl fmt::Write for Report {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.md.push_str(s);
        Ok(())
    }
}

/// A Markdown table.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new<S: Display>(header: impl IntoIterator<Item = S>) -> Self {
        Self {
            header: header.into_iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row<S: Display>(&mut self, cells: impl IntoIterator<Item = S>) -> &mut Self {
        self.rows
            .push(cells.into_iter().map(|c| c.to_string()).collect());
        self
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

impl Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "| {} |", self.header.join(" | "))?;
        writeln!(f, "|{}", "---|".repeat(self.header.len()))?;
        for r in &self.rows {
            writeln!(f, "| {} |", r.join(" | "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_links_its_figures_and_lists_its_metrics() {
        let out = tempfile::tempdir().unwrap();
        let mut r = Report::new(out.path(), "demo").unwrap();
        r.h1("Demo").text("Some words.");
        let mut t = Table::new(["a", "b"]);
        t.row([1, 2]).row([3, 4]);
        r.table(&t);
        let fig = r.figure("x.svg", "x");
        assert_eq!(fig, out.path().join("demo").join("x.svg"));
        let mut m = Metrics::new();
        m.set("speedup", 2.5);
        r.metrics(&m);
        r.finish().unwrap();
        let md = std::fs::read_to_string(out.path().join("demo.md")).unwrap();
        assert!(
            md.starts_with("# Demo\n\nSome words.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n")
        );
        assert!(md.contains("![x](demo/x.svg)"));
        assert!(md.contains("- `speedup`: 2.5000"));
        assert!(md.ends_with("2.5000\n"));
    }
}
