//! `plot`: one SVG per key: latency and bus bandwidth against message size,
//! one line per algorithm (median, with the 95 % bootstrap CI as whiskers),
//! and the chosen bands shaded in the colour of their algorithm.
//!
//! Bus bandwidth is nccl-tests' definition: all-reduce `S/t · 2(W−1)/W`,
//! all-gather `S/t · (W−1)/W`, with `S` the output bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use tuned_schema::{Algo, Band, TableKey};

use crate::evidence::{Evidence, KeyEvidence};
use crate::format;
use crate::stats;
use crate::sweep::point_seed;

const WIDTH: u32 = 1100;
const HEIGHT: u32 = 900;

/// One algorithm's measured points, ascending in size.
struct Series {
    algo: Algo,
    points: Vec<SeriesPoint>,
}

struct SeriesPoint {
    bytes: u64,
    median: f64,
    ci_low: f64,
    ci_high: f64,
}

/// The colour of an algorithm, the same in every figure.
fn colour(algo: Algo) -> RGBColor {
    match algo {
        Algo::Nccl => RGBColor(31, 119, 180),
        Algo::OneShotPush => RGBColor(214, 39, 40),
        Algo::OneShotPull => RGBColor(44, 160, 44),
        Algo::TwoShotPull => RGBColor(255, 127, 14),
        Algo::TwoShotPush => RGBColor(148, 103, 189),
    }
}

/// `all_reduce-ws8-bf16-graph.svg`
pub fn file_name(key: &TableKey) -> String {
    format!(
        "{}-ws{}-{}-{}.svg",
        key.collective.name(),
        key.world_size,
        key.dtype.name(),
        key.mode.name()
    )
}

/// Writes one SVG per key of `evidence` into `folder`, shading `bands` where a
/// key has them. Returns the files written.
pub fn plot_evidence(
    evidence: &Evidence,
    bands: &BTreeMap<TableKey, Vec<Band>>,
    folder: &Path,
) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(folder)
        .map_err(|e| format!("cannot create {}: {e}", folder.display()))?;
    let mut written = Vec::new();
    for key in &evidence.keys {
        let path = folder.join(file_name(&key.key()));
        let key_bands = bands.get(&key.key()).map(Vec::as_slice).unwrap_or(&[]);
        let title = format!(
            "{} — {} {} {}",
            key.key(),
            evidence.platform.gpu,
            evidence.platform.arch,
            evidence.platform.link.name()
        );
        plot_key(key, key_bands, &title, &path)?;
        written.push(path);
    }
    Ok(written)
}

fn series_of(key: &KeyEvidence) -> Vec<Series> {
    let mut by_algo: BTreeMap<Algo, Vec<SeriesPoint>> = BTreeMap::new();
    for point in key.points.iter().filter(|p| p.usable()) {
        let summary = stats::summarize(
            &point.samples_us,
            point_seed(&key.key(), point.bytes, point.algo),
        );
        by_algo.entry(point.algo).or_default().push(SeriesPoint {
            bytes: point.bytes,
            median: summary.median,
            ci_low: summary.ci_low,
            ci_high: summary.ci_high,
        });
    }
    by_algo
        .into_iter()
        .map(|(algo, mut points)| {
            points.sort_by_key(|p| p.bytes);
            Series { algo, points }
        })
        .collect()
}

/// Draws one key's figure into `path`.
pub fn plot_key(key: &KeyEvidence, bands: &[Band], title: &str, path: &Path) -> Result<(), String> {
    let series = series_of(key);
    let all: Vec<&SeriesPoint> = series.iter().flat_map(|s| &s.points).collect();
    if all.is_empty() {
        return Err(format!("{}: no measured point to plot", key.key()));
    }
    let x_min = all.iter().map(|p| p.bytes).min().unwrap_or(1) as f64 / 1.3;
    let x_max = all.iter().map(|p| p.bytes).max().unwrap_or(1) as f64 * 1.3;
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    let failed = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| failed(&e))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| failed(&e))?;
    let (upper, lower) = root.split_vertically(HEIGHT / 2);

    let latency = Panel {
        y_label: "latency per call (µs), median and 95% CI",
        values: |p: &SeriesPoint| (p.median, p.ci_low, p.ci_high),
    };
    latency
        .draw(&upper, &series, bands, (x_min, x_max))
        .map_err(|e| failed(&e))?;

    let k = key.key();
    let bandwidth = Panel {
        y_label: "bus bandwidth (GB/s), nccl-tests definition",
        values: move |p: &SeriesPoint| {
            let bw = |t: f64| stats::busbw_gbps(k.collective, k.world_size, p.bytes, t);
            // A longer time is a lower bandwidth: the CI flips.
            (bw(p.median), bw(p.ci_high), bw(p.ci_low))
        },
    };
    bandwidth
        .draw(&lower, &series, bands, (x_min, x_max))
        .map_err(|e| failed(&e))?;
    root.present().map_err(|e| failed(&e))?;
    Ok(())
}

/// One log-log panel: what to plot per point (centre, low, high).
struct Panel<F: Fn(&SeriesPoint) -> (f64, f64, f64)> {
    y_label: &'static str,
    values: F,
}

impl<F: Fn(&SeriesPoint) -> (f64, f64, f64)> Panel<F> {
    fn draw<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        series: &[Series],
        bands: &[Band],
        (x_min, x_max): (f64, f64),
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        let values: Vec<(f64, f64, f64)> = series
            .iter()
            .flat_map(|s| s.points.iter().map(&self.values))
            .collect();
        let y_min = values
            .iter()
            .map(|v| v.1)
            .fold(f64::INFINITY, f64::min)
            .max(1e-9)
            / 1.5;
        let y_max = values.iter().map(|v| v.2).fold(0.0, f64::max) * 1.5;
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(
                (x_min..x_max).log_scale().base(2.0),
                (y_min..y_max).log_scale(),
            )?;

        // Bands first, so the lines draw over them.
        let mut low = x_min;
        for band in bands {
            let high = band.max.map_or(x_max, |m| (m as f64).min(x_max));
            if high > low {
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(low, y_min), (high, y_max)],
                    colour(band.algo).mix(0.10).filled(),
                )))?;
            }
            low = high.max(low);
        }

        chart
            .configure_mesh()
            .x_desc("message size (output bytes)")
            .y_desc(self.y_label)
            .x_label_formatter(&|v| format::size(*v as u64))
            .y_label_formatter(&|v| tick(*v))
            .light_line_style(TRANSPARENT)
            .draw()?;

        for s in series {
            let style = colour(s.algo);
            let points: Vec<(f64, f64, f64, f64)> = s
                .points
                .iter()
                .map(|p| {
                    let (centre, lo, hi) = (self.values)(p);
                    (p.bytes as f64, centre, lo, hi)
                })
                .collect();
            chart
                .draw_series(LineSeries::new(
                    points.iter().map(|p| (p.0, p.1)),
                    style.stroke_width(2),
                ))?
                .label(s.algo.name())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], style.stroke_width(3))
                });
            chart.draw_series(
                points
                    .iter()
                    .map(|p| Circle::new((p.0, p.1), 2, style.filled())),
            )?;
            chart.draw_series(
                points
                    .iter()
                    .filter(|p| p.3 > p.2)
                    .map(|p| PathElement::new(vec![(p.0, p.2), (p.0, p.3)], style)),
            )?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
        Ok(())
    }
}

/// A tick label with as many decimals as its size needs.
fn tick(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 1.0 {
        format!("{value:.1}")
    } else {
        let text = format!("{value:.4}");
        text.trim_end_matches('0').to_string()
    }
}
