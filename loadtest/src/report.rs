//! What a bench leaves behind: a JSON report with plainly named figures (each beside its limit
//! and the ratio to it), and for rollouts an SVG chart a person reads at a glance.
//!
//! Files go into `--out` (the current directory by default), named
//! `<bench>-<unix seconds>.json`, `.svg` for the main chart and `-<name>.svg` for the others
//! (`-memory.svg`: each node's resident memory over the run).

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
pub use chaos::chart::{Series, line_chart, palette_series};

/// Writes `report` and its `charts` (name, SVG; the unnamed one is the main chart) into `out`;
/// returns the paths written.
pub fn write(
    out: &Path,
    bench: &str,
    report: &serde_json::Value,
    charts: Vec<(&str, String)>,
) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let json = out.join(format!("{bench}-{stamp}.json"));
    let text = serde_json::to_string_pretty(report).context("cannot encode the report")?;
    std::fs::write(&json, text + "\n")
        .with_context(|| format!("cannot write {}", json.display()))?;
    let mut written = vec![json];
    for (name, svg) in charts {
        let path = if name.is_empty() {
            out.join(format!("{bench}-{stamp}.svg"))
        } else {
            out.join(format!("{bench}-{stamp}-{name}.svg"))
        };
        std::fs::write(&path, svg).with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path);
    }
    for path in &written {
        eprintln!("wrote {}", path.display());
    }
    Ok(written)
}

/// A figure, its limit and the ratio between them, as the reports name them.
pub fn ratio(measured: f64, limit: f64) -> f64 {
    if measured > 0.0 {
        limit / measured
    } else {
        0.0
    }
}

/// Measured times as a distribution: for each series, the share of measurements (in percent)
/// at or below each time, as steps; `limit`, if any, as a dashed vertical line.
pub fn distribution_chart(
    title: &str,
    x_label: &str,
    series: &[(&str, &str, Vec<f64>)],
    limit: Option<(&str, f64)>,
) -> String {
    let mut lines: Vec<Series<'_>> = series
        .iter()
        .filter(|(_, _, values)| !values.is_empty())
        .map(|(name, color, values)| {
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            let n = sorted.len() as f64;
            let mut points = vec![(0.0, 0.0)];
            for (index, value) in sorted.iter().enumerate() {
                points.push((*value, index as f64 / n * 100.0));
                points.push((*value, (index + 1) as f64 / n * 100.0));
            }
            Series {
                name,
                color,
                dashed: false,
                points,
            }
        })
        .collect();
    if let Some((name, at)) = limit {
        lines.push(Series {
            name,
            color: "#d62728",
            dashed: true,
            points: vec![(at, 0.0), (at, 100.0)],
        });
    }
    line_chart(title, x_label, "% of measurements at or below", &lines)
}

/// Resident memory of each node over time: `samples` are (seconds, node, MiB).
pub fn memory_chart(title: &str, samples: &[(f64, u64, f64)]) -> String {
    let mut nodes: std::collections::BTreeMap<u64, Vec<(f64, f64)>> = Default::default();
    for &(at, node, mib) in samples {
        nodes.entry(node).or_default().push((at, mib));
    }
    let names: Vec<String> = nodes.keys().map(|node| format!("node {node}")).collect();
    line_chart(
        title,
        "seconds since the nodes started",
        "resident memory (MiB)",
        &palette_series(&names, nodes.into_values()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distributions_step_through_every_measurement_and_memory_draws_a_line_per_node() {
        let svg = distribution_chart(
            "failover",
            "seconds",
            &[
                ("leader", "#1f77b4", vec![2.0, 1.0]),
                ("none", "#000", vec![]),
            ],
            Some(("limit", 3.0)),
        );
        assert_eq!(
            svg.matches("<polyline").count(),
            2,
            "empty series are left out"
        );
        assert!(svg.contains("stroke-dasharray"), "the limit is dashed");
        let svg = memory_chart("memory", &[(0.0, 1, 10.0), (1.0, 1, 12.0), (0.0, 2, 11.0)]);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("node 2"));
    }

    #[test]
    fn a_report_is_written_as_json_beside_its_chart() {
        let dir = tempfile::tempdir().unwrap();
        let written = write(
            dir.path(),
            "rollout",
            &serde_json::json!({"limit_ratio": 0.8}),
            vec![("", "<svg/>".into()), ("memory", "<svg/>".into())],
        )
        .unwrap();
        assert_eq!(written.len(), 3);
        assert!(written[2].to_string_lossy().ends_with("-memory.svg"));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&written[0]).unwrap()).unwrap();
        assert_eq!(json["limit_ratio"], 0.8);
    }
}
