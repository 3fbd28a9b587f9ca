//! `plot`: one SVG per key: latency and bus bandwidth against message size,
//! one line per algorithm (median, with its 95 % distribution-free interval as whiskers),
//! and the chosen bands shaded in the colour of their algorithm.
//!
//! Bus bandwidth is nccl-tests' definition: all-reduce `S/t · 2(W−1)/W`,
//! all-gather `S/t · (W−1)/W`, with `S` the output bytes.

use std::collections::BTreeMap;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use policy::{Algo, Band, TableKey};

use crate::evidence::{Evidence, KeyEvidence};
use crate::format;
use crate::stats;

const WIDTH: u32 = 1100;
const HEIGHT: u32 = 900;
/// Opacity of a band's shading.
const BAND_SHADE: f64 = 0.10;

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

/// Colours for algorithms in `Algo::ALL` order (a categorical palette; an
/// algorithm past its end wraps round).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The colour of an algorithm, the same in every figure.
fn colour(algo: Algo) -> RGBColor {
    PALETTE[algo as usize % PALETTE.len()]
}

/// `all_reduce-ws8-bf16-graph.svg`: the key's name, dashed.
pub fn file_name(key: &TableKey) -> String {
    format!("{}.svg", key.to_string().replace(' ', "-"))
}

/// What one key's figure shows, in a line for the index page.
#[derive(Clone, Debug, PartialEq)]
pub struct KeySummary {
    pub key: TableKey,
    /// The figure's file name, or `None` when the key had no usable point.
    pub file: Option<String>,
    /// The shaded bands (empty: none were given or fitted for this key).
    pub bands: Vec<Band>,
    /// Where the shaded bands change algorithm: (last size of the lower band, from, to).
    pub crossovers: Vec<(u64, Algo, Algo)>,
    /// Regret of the shaded bands at the measured sizes, against the fastest
    /// measured algorithm there (medians): median and worst, with the worst's
    /// size. `None` without bands or where the bands' algorithm was never measured.
    pub regret: Option<Regret>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Regret {
    pub sizes: usize,
    pub median: f64,
    pub worst: f64,
    pub worst_at: u64,
}

impl KeySummary {
    /// `one_shot_push ≤ 32KiB | nccl; one_shot_push → nccl after 32KiB; regret …`
    pub fn line(&self) -> String {
        if self.file.is_none() {
            return "no usable point (none was measured, or each failed its check or has no samples): no figure".to_string();
        }
        let mut parts = Vec::new();
        if self.bands.is_empty() {
            parts.push("no bands shaded".to_string());
        } else {
            parts.push(format!(
                "bands {}",
                format::bands(&self.bands, format::size)
            ));
        }
        if !self.crossovers.is_empty() {
            let list = format::list(self.crossovers.iter().map(|(at, from, to)| {
                format!(
                    "{} → {} after {}",
                    from.name(),
                    to.name(),
                    format::size(*at)
                )
            }));
            parts.push(format!("crossovers {list}"));
        }
        if let Some(r) = self.regret {
            parts.push(format!(
                "regret of these bands at {} measured sizes: median {:.2}%, worst {:.2}% (at {})",
                r.sizes,
                r.median * 100.0,
                r.worst * 100.0,
                format::size(r.worst_at)
            ));
        }
        parts.join("; ")
    }
}

/// Writes one SVG per key of `evidence` that has a usable point into
/// `folder` (which must exist), shading `bands` where a key has them, and an
/// `index.html` that links every figure. Returns a summary per key, in the
/// evidence's order.
pub fn plot_evidence(
    evidence: &Evidence,
    bands: &BTreeMap<TableKey, Vec<Band>>,
    folder: &Path,
) -> Result<Vec<KeySummary>, String> {
    let mut summaries = Vec::new();
    for key in &evidence.keys {
        let key_bands = bands.get(&key.key()).cloned().unwrap_or_default();
        let usable = key.points.iter().any(|p| p.usable());
        let file = usable.then(|| file_name(&key.key()));
        if let Some(file) = &file {
            let title = format!(
                "{} — {} {} {}",
                key.key(),
                evidence.platform.gpu,
                evidence.platform.arch,
                evidence.platform.link.name()
            );
            plot_key(key, &key_bands, &title, &folder.join(file))?;
        }
        summaries.push(KeySummary {
            key: key.key(),
            file,
            crossovers: crossovers(&key_bands),
            regret: regret(key, &key_bands),
            bands: key_bands,
        });
    }
    let index = index_html(evidence, &summaries);
    std::fs::write(folder.join(INDEX), index)
        .map_err(|e| format!("cannot write {}: {e}", folder.join(INDEX).display()))?;
    Ok(summaries)
}

/// The index page's name inside a plot folder.
pub const INDEX: &str = "index.html";

fn crossovers(bands: &[Band]) -> Vec<(u64, Algo, Algo)> {
    bands
        .windows(2)
        .filter_map(|pair| Some((pair[0].max?, pair[0].algo, pair[1].algo)))
        .collect()
}

/// The regret of `bands` at each measured size of `key` where the band's
/// algorithm has a usable point (see [`KeySummary::regret`]).
pub fn regret(key: &KeyEvidence, bands: &[Band]) -> Option<Regret> {
    if bands.is_empty() {
        return None;
    }
    let mut regrets: Vec<(f64, u64)> = Vec::new();
    for (bytes, points) in key.by_size() {
        let Some(band) = tuned_schema::interpret::bands_containing(bands, bytes).next() else {
            continue;
        };
        let usable = points.iter().filter(|p| p.usable());
        let medians: Vec<(Algo, f64)> = usable
            .map(|p| (p.algo, stats::median(&p.samples_us)))
            .collect();
        let best = medians.iter().map(|m| m.1).fold(f64::INFINITY, f64::min);
        if let Some(&(_, t)) = medians.iter().find(|m| m.0 == band.algo)
            && best.is_finite()
        {
            regrets.push(((t - best) / best, bytes));
        }
    }
    if regrets.is_empty() {
        return None;
    }
    let (worst, worst_at) = regrets
        .iter()
        .copied()
        .fold((f64::NEG_INFINITY, 0), |a, b| if b.0 > a.0 { b } else { a });
    let values: Vec<f64> = regrets.iter().map(|r| r.0).collect();
    Some(Regret {
        sizes: values.len(),
        median: stats::median(&values),
        worst,
        worst_at,
    })
}

/// The page that links every figure, with one summary line per key.
fn index_html(evidence: &Evidence, summaries: &[KeySummary]) -> String {
    use std::fmt::Write as _;
    let p = &evidence.platform;
    let title = escape(&format!(
        "{} {} {} — {} ({} backend, {})",
        p.arch,
        p.link.name(),
        p.gpu,
        p.date,
        p.backend,
        if evidence.complete {
            "complete sweep"
        } else {
            "interrupted sweep"
        }
    ));
    let mut out = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n</head>\n<body>\n<h1>{title}</h1>\n<ul>\n"
    );
    for s in summaries {
        let name = escape(&s.key.to_string());
        let entry = match &s.file {
            Some(file) => format!("<a href=\"#{}\">{name}</a>", escape(file)),
            None => name.clone(),
        };
        let _ = writeln!(out, "<li>{entry}: {}</li>", escape(&s.line()));
    }
    out.push_str("</ul>\n");
    for s in summaries {
        if let Some(file) = &s.file {
            let file = escape(file);
            let _ = writeln!(
                out,
                "<h2 id=\"{file}\">{}</h2>\n<p>{}</p>\n<p><a href=\"{file}\"><img src=\"{file}\" alt=\"{}\" width=\"{WIDTH}\"></a></p>",
                escape(&s.key.to_string()),
                escape(&s.line()),
                escape(&s.key.to_string()),
            );
        }
    }
    out.push_str("</body>\n</html>\n");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn series_of(key: &KeyEvidence) -> Vec<Series> {
    let mut by_algo: BTreeMap<Algo, Vec<SeriesPoint>> = BTreeMap::new();
    for point in key.points.iter().filter(|p| p.usable()) {
        let Some(m) = stats::median_interval(&point.samples_us, stats::CONFIDENCE) else {
            continue;
        };
        by_algo.entry(point.algo).or_default().push(SeriesPoint {
            bytes: point.bytes,
            median: m.median,
            ci_low: m.low,
            ci_high: m.high,
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

        // Bands first, so the lines draw over them; one legend entry per
        // algorithm that owns a band, and each inner edge labelled.
        let mut low = x_min;
        let mut in_legend: Vec<Algo> = Vec::new();
        for band in bands {
            let high = band.max.map_or(x_max, |m| (m as f64).min(x_max));
            if high > low {
                let shade = colour(band.algo).mix(BAND_SHADE).filled();
                let drawn = chart.draw_series(std::iter::once(Rectangle::new(
                    [(low, y_min), (high, y_max)],
                    shade,
                )))?;
                if !in_legend.contains(&band.algo) {
                    in_legend.push(band.algo);
                    drawn
                        .label(format!("band: {}", band.algo.name()))
                        .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 18, y + 6)], shade));
                }
            }
            low = high.max(low);
        }
        for edge in bands.iter().filter_map(|b| b.max) {
            let x = edge as f64;
            if x <= x_min || x >= x_max {
                continue;
            }
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(x, y_min), (x, y_max)],
                BLACK.mix(0.35),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("≤ {}", format::size(edge)),
                (x, y_max / 1.08),
                ("sans-serif", 13).into_font().color(&BLACK.mix(0.7)),
            )))?;
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
