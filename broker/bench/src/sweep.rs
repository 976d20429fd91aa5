//! Curves instead of points: PUB+FIN at saturation swept along one axis at a time (clients,
//! message size, active topics, servers: see [`crate::cluster`]), each point run against every curve profile like any other
//! case, and drawn as SVG charts (both servers on each chart) that `docs/benchmarks.md`
//! embeds. `BENCH_SWEEPS=1 make bench` runs them; `make bench` alone leaves them out.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::coord::combinators::BindKeyPoints;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::broker;
use crate::cluster::ClusterConfig;
use crate::compare::{Case, CaseKind, Headline, Results, Skip};
use crate::run::RunConfig;

/// What a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    /// Producers = consumers.
    Clients,
    /// Body size, bytes.
    MessageBytes,
    /// Topics the 16 producers and consumers are spread over.
    Topics,
    /// Servers: RustQueue brokers behind the gateway, or nsqd spread over directly
    /// ([`crate::cluster`]).
    Brokers,
}

impl Axis {
    /// Every axis, in run order.
    pub const ALL: [Axis; 4] = [
        Axis::Clients,
        Axis::MessageBytes,
        Axis::Topics,
        Axis::Brokers,
    ];

    fn slug(self) -> &'static str {
        match self {
            Axis::Clients => "clients",
            Axis::MessageBytes => "size",
            Axis::Topics => "topics",
            Axis::Brokers => "brokers",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Axis::Clients => "producers = consumers",
            Axis::MessageBytes => "message size, bytes",
            Axis::Topics => "active topics (16 producers, at least 16 consumers)",
            Axis::Brokers => "brokers (RustQueue behind its gateway; nsqd spread over directly)",
        }
    }

    /// The x values of the sweep.
    pub fn points(self) -> &'static [u64] {
        match self {
            Axis::Clients => &[1, 4, 16, 64],
            Axis::MessageBytes => &[100, 1024, 16 * 1024, 256 * 1024, 1024 * 1024],
            Axis::Topics => &[1, 16, 256],
            Axis::Brokers => &[1, 3],
        }
    }
}

/// Where a case sits on a curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// The axis.
    pub axis: Axis,
    /// The x value.
    pub x: u64,
}

/// The profiles drawn on every curve: each RustQueue ack mode and nsqd's default.
pub const CURVE_PROFILES: [&str; 4] = [
    "rustqueue-durable",
    broker::BASELINE,
    "rustqueue-write_ack",
    "rustqueue-nsq_relaxed",
];

/// `1024` as `1 KiB`, `100` as `100 B`.
pub(crate) fn size_label(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// The sweep cases: PUB+FIN at saturation, 16/16 and 1 KiB except along the swept axis.
pub fn cases(base: &RunConfig) -> Vec<Case> {
    let skip: Vec<Skip> = broker::profiles()
        .into_iter()
        .filter(|p| !CURVE_PROFILES.contains(&p.name.as_str()))
        .map(|p| Skip {
            profile: p.name,
            reason: "the curves compare each RustQueue ack mode with nsqd's default; the other \
                     nsqd profiles are in the point tables"
                .to_owned(),
        })
        .collect();
    let mut all = Vec::new();
    for axis in Axis::ALL {
        for &x in axis.points() {
            let (load, what) = point(base, axis, x);
            let name = format!("sweep_{}_{}", axis.slug(), x);
            all.push(Case {
                name: name.clone(),
                title: format!("Curve point: PUB + RDY/FIN at saturation, {what}"),
                headline: Headline::ReceiveRate,
                load: RunConfig {
                    topic_prefix: format!("bench-{name}"),
                    ..load
                },
                kind: match axis {
                    Axis::Brokers => CaseKind::Cluster(ClusterConfig {
                        brokers: x as usize,
                    }),
                    _ => CaseKind::Load,
                },
                skip: skip.clone(),
                sweep: Some(SweepPoint { axis, x }),
            });
        }
    }
    all
}

fn point(base: &RunConfig, axis: Axis, x: u64) -> (RunConfig, String) {
    let n = x as usize;
    match axis {
        Axis::Clients => (
            RunConfig {
                producers: n,
                consumers: n,
                ..base.clone()
            },
            format!("{n} producers + {n} consumers, 1 KiB"),
        ),
        Axis::MessageBytes => (
            RunConfig {
                message_bytes: n,
                ..base.clone()
            },
            format!("16 producers + 16 consumers, {}", size_label(x)),
        ),
        Axis::Topics => (
            RunConfig {
                topics: n,
                ..base.clone()
            },
            format!(
                "16 producers over {n} topic(s), {} consumers (one or more per topic), 1 KiB",
                base.consumers.max(n)
            ),
        ),
        Axis::Brokers => (
            base.clone(),
            format!(
                "16 producers + 16 consumers, 1 KiB, {n} server(s): RustQueue producers through \
                 the gateway, consumers dealt to the brokers; nsqd producers and consumers dealt \
                 to the nsqd directly"
            ),
        ),
    }
}

/// One curve: a profile's (x, y) points along an axis, medians of its complete runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Curve {
    /// Profile name.
    pub profile: String,
    /// Points in x order; a point with no complete run is left out.
    pub points: Vec<(u64, f64)>,
}

/// What a chart plots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// Deliveries per second in the window.
    Throughput,
    /// p99 publish-ack latency, ms.
    P99,
}

impl Measure {
    fn label(self) -> &'static str {
        match self {
            Measure::Throughput => "delivered msg/s",
            Measure::P99 => "p99 publish-ack, ms",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Measure::Throughput => "throughput",
            Measure::P99 => "p99",
        }
    }
}

/// The curves of `axis` for `measure`, one per curve profile that has any point.
pub fn curves(results: &Results, axis: Axis, measure: Measure) -> Vec<Curve> {
    let cases: Vec<&Case> = results
        .cases
        .iter()
        .filter(|c| c.sweep.is_some_and(|s| s.axis == axis))
        .collect();
    let mut out = Vec::new();
    for profile in CURVE_PROFILES {
        let mut points = Vec::new();
        for case in &cases {
            let values: Vec<f64> = results
                .runs
                .iter()
                .filter(|r| r.case == case.name && r.profile == profile && r.counts())
                .filter_map(|r| r.report.as_ref())
                .map(|r| match measure {
                    Measure::Throughput => r.receive_msgs_per_sec,
                    Measure::P99 => r.latency.p99_us as f64 / 1000.0,
                })
                .collect();
            if let (Some(v), Some(p)) = (median(values), case.sweep) {
                points.push((p.x, v));
            }
        }
        if !points.is_empty() {
            points.sort_by_key(|p| p.0);
            out.push(Curve {
                profile: profile.to_owned(),
                points,
            });
        }
    }
    out
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        f64::midpoint(v[n / 2 - 1], v[n / 2])
    })
}

/// A chart written next to the results JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chart {
    /// What it shows.
    pub title: String,
    /// The SVG file.
    pub path: PathBuf,
}

/// The charts a results document has data for: throughput along every swept axis, and p99
/// against clients.
fn wanted(results: &Results) -> Vec<(Axis, Measure)> {
    let mut out = Vec::new();
    for axis in Axis::ALL {
        for measure in [Measure::Throughput, Measure::P99] {
            if measure == Measure::P99 && axis != Axis::Clients {
                continue;
            }
            if !curves(results, axis, measure).is_empty() {
                out.push((axis, measure));
            }
        }
    }
    out
}

/// Draws every chart `results` has data for as `<dir>/<stem>-<axis>-<measure>.svg`.
pub fn write_charts(results: &Results, dir: &Path, stem: &str) -> Result<Vec<Chart>, String> {
    let mut charts = Vec::new();
    for (axis, measure) in wanted(results) {
        let path = dir.join(format!("{stem}-{}-{}.svg", axis.slug(), measure.slug()));
        let title = format!("{} against {}", measure.label(), axis.label());
        draw(
            &path,
            &title,
            axis,
            measure,
            &curves(results, axis, measure),
        )?;
        charts.push(Chart { title, path });
    }
    Ok(charts)
}

/// Distinct colours per profile, fixed so every chart reads the same way.
fn colour(profile: &str) -> RGBColor {
    match profile {
        "rustqueue-durable" => RGBColor(0x0f, 0x62, 0xfe),
        "rustqueue-write_ack" => RGBColor(0x00, 0x9d, 0x9a),
        "rustqueue-nsq_relaxed" => RGBColor(0x8a, 0x3f, 0xfc),
        _ => RGBColor(0xda, 0x1e, 0x28),
    }
}

fn draw(
    path: &Path,
    title: &str,
    axis: Axis,
    measure: Measure,
    curves: &[Curve],
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", path.display());
    let xs = axis.points();
    let (x0, x1) = (xs[0] as f64 * 0.8, xs[xs.len() - 1] as f64 * 1.25);
    let y1 = curves
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.1))
        .fold(0.0_f64, f64::max)
        // headroom for the legend in the upper right, above the highest point
        * 1.45;
    let root = SVGBackend::new(path, (760, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x0..x1)
                .log_scale()
                .with_key_points(xs.iter().map(|&x| x as f64).collect::<Vec<_>>()),
            0.0..y1.max(1.0),
        )
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(axis.label())
        .y_desc(measure.label())
        .light_line_style(WHITE)
        .x_label_formatter(&|x| x_label(axis, *x))
        .y_label_formatter(&|y| y_label(*y))
        .draw()
        .map_err(|e| err(&e))?;
    for c in curves {
        let style = colour(&c.profile);
        let pts: Vec<(f64, f64)> = c.points.iter().map(|&(x, y)| (x as f64, y)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), style.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(c.profile.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, style.filled())))
            .map_err(|e| err(&e))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

fn x_label(axis: Axis, x: f64) -> String {
    let x = x.round() as u64;
    match axis {
        Axis::MessageBytes => size_label(x),
        _ => x.to_string(),
    }
}

fn y_label(y: f64) -> String {
    if y >= 1000.0 {
        format!("{:.0}k", y / 1000.0)
    } else if y >= 10.0 {
        format!("{y:.0}")
    } else {
        format!("{y:.1}")
    }
}

/// The markdown section that embeds `charts` (paths relative to `markdown_dir`), with the
/// figures of every point below each chart.
pub fn section(results: &Results, charts: &[Chart], markdown_dir: &Path) -> String {
    let mut md = String::new();
    if charts.is_empty() {
        return md;
    }
    let _ = writeln!(
        md,
        "\n## Curves\n\nPUB + RDY/FIN at saturation with one parameter swept at a time (16 \
         producers, 16 consumers, 1 KiB otherwise); medians of {} round(s) per point, only \
         complete runs (full drain, nothing missing).\n",
        results.settings.rounds
    );
    for (chart, (axis, measure)) in charts.iter().zip(wanted(results)) {
        let rel = relative(&chart.path, markdown_dir);
        let _ = writeln!(md, "### {}\n\n![{}]({})\n", chart.title, chart.title, rel);
        if axis == Axis::Brokers {
            let _ = writeln!(
                md,
                "Every server process (brokers, gateway, discovery; or the nsqd) runs on the same \
                 {} CPUs as the load generator, so more servers cannot add cores here: this curve \
                 shows what the gateway hop and the extra processes cost, not how a cluster of \
                 machines scales. RustQueue's first point already goes through the gateway; \
                 nsqd has no gateway, so its producers connect to the nsqd directly.\n",
                results.machine.cpus
            );
        }
        figures(
            &mut md,
            results,
            (axis, measure),
            &curves(results, axis, measure),
        );
    }
    md
}

/// The points of `curves` as a table: one row per x, one column per profile.
fn figures(md: &mut String, results: &Results, (axis, measure): (Axis, Measure), curves: &[Curve]) {
    let _ = write!(md, "| {} |", axis.label());
    for c in curves {
        let _ = write!(md, " `{}` |", c.profile);
    }
    let _ = writeln!(md, "\n|---|{}", "---|".repeat(curves.len()));
    for &x in axis.points() {
        let _ = write!(md, "| {} |", x_label(axis, x as f64));
        for c in curves {
            let case = format!("sweep_{}_{x}", axis.slug());
            let ran = results
                .runs
                .iter()
                .any(|r| r.case == case && r.profile == c.profile);
            match c.points.iter().find(|p| p.0 == x) {
                Some(&(_, y)) if measure == Measure::Throughput => {
                    let _ = write!(md, " {} |", crate::compare::thousands(y.round() as u64));
                }
                Some(&(_, y)) => {
                    let _ = write!(md, " {y:.2} |");
                }
                None if ran => md.push_str(" not counted |"),
                None => md.push_str(" not run |"),
            }
        }
        md.push('\n');
    }
    md.push('\n');
}

/// `path` relative to `dir` when both are under a common ancestor (`../bench/...`).
fn relative(path: &Path, dir: &Path) -> String {
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let (path, dir) = (abs(path), abs(dir));
    let common = path
        .components()
        .zip(dir.components())
        .take_while(|(a, b)| a == b)
        .count();
    let ups = dir.components().count() - common;
    let mut out = PathBuf::new();
    for _ in 0..ups {
        out.push("..");
    }
    for c in path.components().skip(common) {
        out.push(c);
    }
    out.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_a_person_writes_them() {
        assert_eq!(size_label(100), "100 B");
        assert_eq!(size_label(1024), "1 KiB");
        assert_eq!(size_label(256 * 1024), "256 KiB");
        assert_eq!(size_label(1 << 20), "1 MiB");
        assert_eq!(size_label(1500), "1500 B");
    }

    #[test]
    fn paths_are_made_relative_to_the_markdown() {
        assert_eq!(
            relative(Path::new("/r/bench/results/a.svg"), Path::new("/r/docs")),
            "../bench/results/a.svg"
        );
        assert_eq!(
            relative(Path::new("/r/docs/a.svg"), Path::new("/r/docs")),
            "a.svg"
        );
    }
}
