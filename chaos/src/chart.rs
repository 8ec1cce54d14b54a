//! SVG line charts, small enough to read in a browser or a pull request: the benches'
//! reports (`loadtest`) and the simulation's scale run draw with them.

use std::fmt::Write as _;

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
}
