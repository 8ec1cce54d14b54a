//! What a bench leaves behind: a JSON report with plainly named figures (each beside its limit
//! and the ratio to it), and for rollouts an SVG chart a person reads at a glance.
//!
//! Files go into `--out` (the current directory by default), named
//! `<bench>-<unix seconds>.json`, `.svg` for the main chart and `-<name>.svg` for the others
//! (`-memory.svg`: each node's resident memory over the run).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;

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

/// One line of a chart.
pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    pub dashed: bool,
    pub points: Vec<(f64, f64)>,
}

/// A line chart: `series` over a shared x axis from 0, y from 0.
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series<'_>]) -> String {
    const W: f64 = 800.0;
    const H: f64 = 450.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 20.0;
    const TOP: f64 = 40.0;
    const BOTTOM: f64 = 60.0;
    let points = || series.iter().flat_map(|s| s.points.iter());
    let x_max = points().map(|p| p.0).fold(0.0, f64::max).max(1e-9);
    let y_max = points().map(|p| p.1).fold(0.0, f64::max).max(1e-9) * 1.05;
    let x = |v: f64| LEFT + v / x_max * (W - LEFT - RIGHT);
    let y = |v: f64| H - BOTTOM - v / y_max * (H - TOP - BOTTOM);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
        W / 2.0,
        escape(title)
    );
    for tick in 0..=5 {
        let (vx, vy) = (x_max * tick as f64 / 5.0, y_max * tick as f64 / 5.0);
        let _ = writeln!(
            svg,
            "<line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{vx:.1}</text>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{vy:.0}</text>",
            x(vx),
            y(0.0),
            x(vx),
            y(y_max),
            x(vx),
            H - BOTTOM + 18.0,
            LEFT - 6.0,
            y(vy) + 4.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
         <text x=\"16\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {:.1})\">{}</text>",
        (LEFT + W - RIGHT) / 2.0,
        H - 18.0,
        escape(x_label),
        (TOP + H - BOTTOM) / 2.0,
        (TOP + H - BOTTOM) / 2.0,
        escape(y_label)
    );
    for (index, line) in series.iter().enumerate() {
        let path: Vec<String> = line
            .points
            .iter()
            .map(|&(px, py)| format!("{:.1},{:.1}", x(px), y(py)))
            .collect();
        let dash = if line.dashed {
            " stroke-dasharray=\"6 4\""
        } else {
            ""
        };
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash} points=\"{}\"/>\
             <rect x=\"{:.1}\" y=\"{:.1}\" width=\"14\" height=\"3\" fill=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            line.color,
            path.join(" "),
            LEFT + 10.0,
            TOP + 8.0 + index as f64 * 16.0,
            line.color,
            LEFT + 30.0,
            TOP + 12.0 + index as f64 * 16.0,
            escape(line.name)
        );
    }
    svg.push_str("</svg>\n");
    svg
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

/// The colors of a chart's measured series, in order (red is kept for limits and targets).
const PALETTE: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2",
];

/// Solid series named `names`, with the points of each, colored in turn from the palette.
pub fn palette_series<'a>(
    names: &'a [String],
    points: impl IntoIterator<Item = Vec<(f64, f64)>>,
) -> Vec<Series<'a>> {
    names
        .iter()
        .zip(points)
        .enumerate()
        .map(|(index, (name, points))| Series {
            name,
            color: PALETTE[index % PALETTE.len()],
            dashed: false,
            points,
        })
        .collect()
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

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_draws_every_series_and_escapes_text() {
        let svg = line_chart(
            "rollout <10,000>",
            "seconds",
            "clusters",
            &[
                Series {
                    name: "updated",
                    color: "#1f77b4",
                    dashed: false,
                    points: vec![(0.0, 0.0), (10.0, 10_000.0)],
                },
                Series {
                    name: "physical limit",
                    color: "#2ca02c",
                    dashed: true,
                    points: vec![(0.0, 0.0), (8.0, 10_000.0)],
                },
            ],
        );
        assert!(svg.starts_with("<svg"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("rollout &lt;10,000&gt;"));
        assert!(svg.contains("stroke-dasharray"));
    }

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
