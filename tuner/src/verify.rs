//! `verify`: judge a tuned file on sizes it was not fitted on, and say how
//! sure the judgement is.
//!
//! **Sizes.** Per table, the *spread* sizes (1.25× and 1.75× powers of two,
//! never on the sweep grid) and the *edge* sizes: 10 % and 3 % below every
//! band edge (inside the band) and 3 % and 10 % above it (in the next band).
//! Spread sizes say how a table does in general; an edge in the wrong place
//! shows at the edge sizes, which lie closer to every edge than any grid point
//! does.
//!
//! **Measuring a size.** Every candidate is verified and timed once; close
//! choices among them get extra rounds (as in the sweep), which names the
//! *rival*: the fastest candidate other than the file's choice. Unless that
//! first look already shows the choice faster than its rival by more than the
//! worst limit, with confidence, the two are then measured again from scratch,
//! *interleaved*: one round each in turn, the order reversed every round, so a
//! machine whose clocks or temperature drift slows both alike. Rounds are
//! added (at least 4) until the regret's interval is clear of the limits or
//! the rounds run out.
//!
//! **Regret** at a size is `max(0, t_chosen / t_rival − 1)` with medians, and
//! its interval (99 %, see [`CONFIDENCE`]) comes from the two medians'
//! distribution-free intervals ([`stats::ratio`]). It is always the estimate: nothing is
//! zeroed for being insignificant; the interval says what the noise allows.
//!
//! **Verdict** per key: FAIL when a wrong result was seen, or the interval of
//! the worst regret (any size) lies above the worst limit, or that of the
//! median regret (spread sizes) above the median limit; PASS when both
//! intervals lie at or below their limits; INCONCLUSIVE otherwise: the noise
//! is too high (or the regret too close to a limit) to tell.

use policy::{Algo, Collective, DType, Mode, TableKey};
use tuned_schema::Document;
use tuned_schema::interpret;

use crate::backend::{Backend, Repetitions};
use crate::candidates::{self, Column, Effort};
use crate::evidence::{PointEvidence, PointOrigin};
use crate::grid;
use crate::observe::{Observer, RunStatus};
use crate::stats;
use serde::Serialize;

/// Where edge sizes sit, as fractions of the edge: inside the band, then past it.
pub const EDGE_OFFSETS: [f64; 4] = [-0.10, -0.03, 0.03, 0.10];

/// Coverage of each size's regret interval. A key's worst regret is the
/// largest of some fifty sizes' regrets, and its lower end is only as sure as
/// all of theirs: at 95 % each, a table whose worst is just under the limit
/// would now and then be failed.
pub const CONFIDENCE: f64 = 0.99;

#[derive(Clone, Debug, PartialEq)]
pub struct VerifySettings {
    /// Empty: every table whose world size the backend can form.
    pub world_sizes: Vec<u32>,
    /// Empty: every collective / dtype / mode the file has tables for.
    pub collectives: Vec<Collective>,
    pub dtypes: Vec<DType>,
    pub modes: Vec<Mode>,
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// The first look at every candidate, and the extra rounds that find the
    /// rival (`max_remeasure_rounds` and the margin); its `confidence` is the
    /// coverage of every interval here, each size's regret's included.
    pub effort: Effort,
    /// Interleaved rounds of the choice and its rival: at least this many (or
    /// `max_rounds`, if fewer), so that one slow round of either moves the
    /// medians little…
    pub min_rounds: u32,
    /// …and at most this many, fewer once the regret's interval is clear of
    /// the limits.
    pub max_rounds: u32,
    /// Fail when a key's median regret (spread sizes) exceeds this fraction…
    pub max_median_regret: f64,
    /// …or its worst one (any size) exceeds this.
    pub max_worst_regret: f64,
}

impl Default for VerifySettings {
    fn default() -> Self {
        VerifySettings {
            world_sizes: Vec::new(),
            collectives: Vec::new(),
            dtypes: Vec::new(),
            modes: Vec::new(),
            min_bytes: 16,
            max_bytes: 256 << 20,
            effort: Effort {
                reps: Repetitions {
                    samples: 25,
                    warmup: 5,
                },
                margin: crate::fit::DEFAULT_MARGIN,
                // Finer than the sweep's: the rounds here find the rival,
                // which may be within the margin of the choice.
                resolution: crate::fit::DEFAULT_MARGIN / 2.0,
                confidence: CONFIDENCE,
                max_remeasure_rounds: 2,
                max_probe_rounds: 3,
            },
            min_rounds: 4,
            max_rounds: 8,
            max_median_regret: 0.01,
            max_worst_regret: 0.05,
        }
    }
}

/// Why a size was chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SizeKind {
    /// 1.25 × 2^k or 1.75 × 2^k.
    Spread,
    /// Near the band edge `edge` (a band's inclusive `max`): `offset` is the
    /// fraction from it, negative inside the band, positive past it.
    Edge { edge: u64, offset: f64 },
}

impl SizeKind {
    pub fn is_edge(&self) -> bool {
        matches!(self, SizeKind::Edge { .. })
    }
}

/// `kind` (`spread` or `edge`), `edge_bytes` and `edge_offset` (`null` for
/// a spread size), beside the size's other fields.
impl Serialize for SizeKind {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let (kind, edge, offset) = match *self {
            SizeKind::Spread => ("spread", None, None),
            SizeKind::Edge { edge, offset } => ("edge", Some(edge), Some(offset)),
        };
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("kind", kind)?;
        map.serialize_entry("edge_bytes", &edge)?;
        map.serialize_entry("edge_offset", &offset)?;
        map.end()
    }
}

/// The file's choice against its rival at one size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SizeRegret {
    pub bytes: u64,
    #[serde(flatten)]
    pub kind: SizeKind,
    /// What the file selects, after the run-time capacity check (a size the
    /// kernel cannot take runs on NCCL).
    pub chosen: Algo,
    /// The fastest other candidate; `None` where nothing else runs.
    pub rival: Option<Algo>,
    /// Medians (µs) of the measurement the regret comes from.
    pub chosen_us: f64,
    pub rival_us: Option<f64>,
    /// `max(0, chosen / rival − 1)` with medians.
    pub regret: f64,
    /// The regret's interval at the run's confidence.
    pub low: f64,
    pub high: f64,
    /// Interleaved rounds behind the figures; 0 when the first look already
    /// showed the choice faster than its rival with confidence (or nothing
    /// else runs), and the figures are that look's.
    #[serde(rename = "interleaved_rounds")]
    pub rounds: u32,
}

/// An estimate with its interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

/// `1.50% [0.20%, 3.10%]`: the estimate and its interval.
impl std::fmt::Display for Estimate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} [{}, {}]",
            crate::format::percent(self.value),
            crate::format::percent(self.low),
            crate::format::percent(self.high)
        )
    }
}

/// The regrets of one kind of size of one key.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct RegretSummary {
    pub sizes: usize,
    /// The median of the sizes' regrets; its interval runs from the median of
    /// their lower ends to the median of their upper ends. Spread sizes only:
    /// edge sizes are close calls by design, and no median limit applies.
    pub median: Option<Estimate>,
    /// The largest regret; its interval runs from the largest lower end to the
    /// largest upper end.
    pub worst: Option<Estimate>,
    /// Where the largest regret was measured, when there is one.
    #[serde(rename = "worst_at_bytes")]
    pub worst_at: Option<u64>,
}

impl RegretSummary {
    /// The summary of `sizes`, without the median.
    fn worst_of<'a>(sizes: impl Iterator<Item = &'a SizeRegret>) -> RegretSummary {
        RegretSummary {
            median: None,
            ..RegretSummary::of(sizes)
        }
    }

    fn of<'a>(sizes: impl Iterator<Item = &'a SizeRegret>) -> RegretSummary {
        let sizes: Vec<&SizeRegret> = sizes.collect();
        if sizes.is_empty() {
            return RegretSummary {
                sizes: 0,
                median: None,
                worst: None,
                worst_at: None,
            };
        }
        let pick = |f: fn(&SizeRegret) -> f64| sizes.iter().map(|s| f(s)).collect::<Vec<f64>>();
        let (values, lows, highs) = (pick(|s| s.regret), pick(|s| s.low), pick(|s| s.high));
        let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let worst_at = sizes
            .iter()
            .filter(|s| s.regret > 0.0)
            .max_by(|a, b| a.regret.total_cmp(&b.regret))
            .map(|s| s.bytes);
        RegretSummary {
            sizes: sizes.len(),
            median: Some(Estimate {
                value: stats::median(&values),
                low: stats::median(&lows),
                high: stats::median(&highs),
            }),
            worst: Some(Estimate {
                value: max(&values),
                low: max(&lows),
                high: max(&highs),
            }),
            worst_at,
        }
    }
}

/// A key's verdict, or a file's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    /// The intervals straddle a limit: the noise is too high to tell.
    Inconclusive,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Inconclusive => "INCONCLUSIVE",
        }
    }
}

/// One table's judgement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeyRegret {
    pub key: TableKey,
    pub sizes: Vec<SizeRegret>,
    /// Sizes where an algorithm (the chosen one, or another candidate, which
    /// then could not be judged against) gave a wrong result: always a failure.
    pub wrong_results: Vec<WrongResult>,
    pub spread: RegretSummary,
    pub edges: RegretSummary,
    /// Over every size, spread and edge.
    pub worst: Option<Estimate>,
    pub verdict: Verdict,
    /// Why the verdict is what it is, for people.
    pub reason: String,
}

/// An algorithm that gave a wrong result at a size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WrongResult {
    pub bytes: u64,
    pub algo: Algo,
    pub error: String,
}

/// A table not verified, and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Skipped {
    pub key: TableKey,
    pub reason: String,
}

/// The spread of single samples over the whole run ([`stats::relative_noise`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Noise {
    /// Points (one algorithm at one size, one measurement) it is taken over.
    pub points: usize,
    /// The median point's spread, and the 90th percentile's (fractions).
    pub median: f64,
    pub p90: f64,
}

impl Noise {
    fn of(spreads: &[f64]) -> Option<Noise> {
        let spreads: Vec<f64> = spreads.iter().copied().filter(|s| s.is_finite()).collect();
        (!spreads.is_empty()).then(|| Noise {
            points: spreads.len(),
            median: stats::median(&spreads),
            p90: stats::quantile(&spreads, 0.9),
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct VerifyReport {
    pub keys: Vec<KeyRegret>,
    /// Tables not verified here.
    pub skipped: Vec<Skipped>,
    /// When no table was judged: why.
    pub nothing_judged: Option<String>,
    pub noise: Option<Noise>,
    pub status: RunStatus,
    pub settings: VerifySettings,
}

impl VerifyReport {
    /// FAIL if any key failed; PASS if every key passed in a complete run;
    /// otherwise INCONCLUSIVE. `None` when nothing was judged.
    pub fn verdict(&self) -> Option<Verdict> {
        if self.keys.is_empty() {
            return None;
        }
        let all = |v: Verdict| self.keys.iter().all(|k| k.verdict == v);
        Some(if self.keys.iter().any(|k| k.verdict == Verdict::Fail) {
            Verdict::Fail
        } else if all(Verdict::Pass) && self.status == RunStatus::Complete {
            Verdict::Pass
        } else {
            Verdict::Inconclusive
        })
    }
}

/// One table's work: its sizes and their kinds.
struct KeyWork {
    key: TableKey,
    sizes: Vec<(u64, SizeKind)>,
}

/// Measures the spread and edge sizes of every selected table of `doc` on
/// `backend`.
pub fn verify(
    backend: &mut dyn Backend,
    doc: &Document,
    settings: &VerifySettings,
    observer: &mut dyn Observer,
) -> Result<VerifyReport, String> {
    let platform = backend.platform();
    if (platform.arch, platform.link) != (doc.platform.arch, doc.platform.link) {
        return Err(format!(
            "the file is for {} {}, but this machine is {} {}",
            doc.platform.arch,
            doc.platform.link.name(),
            platform.arch,
            platform.link.name()
        ));
    }
    let available = backend.world_sizes();
    let mut work = Vec::new();
    let mut skipped = Vec::new();
    let mut selected = 0;
    for table in &doc.tables {
        let k = table.key;
        let wanted = (settings.world_sizes.is_empty()
            || settings.world_sizes.contains(&k.world_size))
            && (settings.collectives.is_empty() || settings.collectives.contains(&k.collective))
            && (settings.dtypes.is_empty() || settings.dtypes.contains(&k.dtype))
            && (settings.modes.is_empty() || settings.modes.contains(&k.mode));
        if !wanted {
            continue;
        }
        selected += 1;
        let sizes = key_sizes(table, backend.size_step(k), settings);
        let reason = if !available.contains(&k.world_size) {
            format!(
                "world size {} is not available here (available: {})",
                k.world_size,
                crate::format::list(&available)
            )
        } else if sizes.is_empty() {
            format!(
                "no held-out size between {} and {}",
                crate::format::size(settings.min_bytes),
                crate::format::size(settings.max_bytes)
            )
        } else {
            work.push(KeyWork { key: k, sizes });
            continue;
        };
        skipped.push(Skipped { key: k, reason });
    }
    if !work.is_empty() {
        // The first look at every size; interleaved rounds come on top where
        // they are needed.
        let mut cost = (0, 0.0);
        for KeyWork { key, sizes } in &work {
            let sizes = sizes.iter().map(|&(bytes, _)| bytes);
            candidates::add_first_look_cost(&mut cost, backend, *key, sizes, settings.effort.reps);
        }
        observer.started(cost.0, cost.1);
    }

    let docs = std::slice::from_ref(doc);
    let mut keys = Vec::new();
    let mut spreads = Vec::new();
    let mut status = RunStatus::Complete;
    'keys: for KeyWork { key, sizes } in work {
        observer.key_started(&key);
        let mut regrets = Vec::new();
        let mut wrong = Vec::new();
        for (bytes, kind) in sizes {
            let mut judge = SizeJudge {
                backend: &mut *backend,
                docs,
                key,
                settings,
                observer: &mut *observer,
                spreads: &mut spreads,
            };
            match judge.judge(bytes, kind, &mut wrong) {
                Ok(regret) => regrets.extend(regret),
                Err(stop) => {
                    // What this key measured so far still counts.
                    if !regrets.is_empty() || !wrong.is_empty() {
                        keys.push(summarize(key, regrets, wrong, settings));
                    }
                    status = stop;
                    break 'keys;
                }
            }
        }
        keys.push(summarize(key, regrets, wrong, settings));
    }
    let nothing_judged = keys
        .is_empty()
        .then(|| nothing_judged(doc, selected, &skipped, settings));
    Ok(VerifyReport {
        keys,
        skipped,
        nothing_judged,
        noise: Noise::of(&spreads),
        status,
        settings: settings.clone(),
    })
}

/// Why a run judged nothing, in one line.
fn nothing_judged(
    doc: &Document,
    selected: usize,
    skipped: &[Skipped],
    settings: &VerifySettings,
) -> String {
    if doc.tables.is_empty() {
        return "the file has no [[table]]".to_string();
    }
    if selected == 0 {
        // Per filter given: what was asked for, and what the file has.
        fn names<T: Ord + Copy, S: std::fmt::Display>(
            values: impl Iterator<Item = T>,
            name: impl Fn(T) -> S,
        ) -> String {
            let mut v: Vec<T> = values.collect();
            v.sort();
            v.dedup();
            crate::format::list(v.into_iter().map(name))
        }
        let (mut asked, mut has) = (Vec::new(), Vec::new());
        let mut filter = |flag: &str, chosen: String, what: &str, of_tables: String| {
            if !chosen.is_empty() {
                asked.push(format!("{flag} {chosen}"));
                has.push(format!("{what} {of_tables}"));
            }
        };
        let keys = || doc.tables.iter().map(|t| t.key);
        filter(
            "--world-sizes",
            crate::format::list(&settings.world_sizes),
            "world sizes",
            names(keys().map(|k| k.world_size), |w| w),
        );
        filter(
            "--collectives",
            names(settings.collectives.iter().copied(), Collective::name),
            "collectives",
            names(keys().map(|k| k.collective), Collective::name),
        );
        filter(
            "--dtypes",
            names(settings.dtypes.iter().copied(), DType::name),
            "dtypes",
            names(keys().map(|k| k.dtype), DType::name),
        );
        filter(
            "--modes",
            names(settings.modes.iter().copied(), Mode::name),
            "modes",
            names(keys().map(|k| k.mode), Mode::name),
        );
        return format!(
            "no table of the file matches {} (its tables have {})",
            asked.join(" "),
            has.join("; ")
        );
    }
    format!(
        "every selected table was skipped ({} listed above)",
        skipped.len()
    )
}

/// A table's spread sizes and edge sizes in the range, each once (an edge
/// size that is also a spread size counts as an edge size), ascending.
fn key_sizes(
    table: &tuned_schema::Table,
    align: u64,
    settings: &VerifySettings,
) -> Vec<(u64, SizeKind)> {
    let (min, max) = (settings.min_bytes, settings.max_bytes);
    let mut sizes: Vec<(u64, SizeKind)> = Vec::new();
    for band in &table.bands {
        let Some(edge) = band.max else { continue };
        for offset in EDGE_OFFSETS {
            let Some(bytes) = edge_size(edge, offset, align) else {
                continue;
            };
            if (min..=max).contains(&bytes) && !sizes.iter().any(|s| s.0 == bytes) {
                sizes.push((bytes, SizeKind::Edge { edge, offset }));
            }
        }
    }
    for bytes in grid::holdout_sizes(min, max, align) {
        if !sizes.iter().any(|s| s.0 == bytes) {
            sizes.push((bytes, SizeKind::Spread));
        }
    }
    sizes.sort_by_key(|s| s.0);
    sizes
}

/// `edge × (1 + offset)`, aligned so that it stays on its side of the edge:
/// down inside the band (at most the edge), up past it (above the edge).
fn edge_size(edge: u64, offset: f64, align: u64) -> Option<u64> {
    let align = align.max(1);
    let raw = edge as f64 * (1.0 + offset);
    let bytes = if offset < 0.0 {
        (raw / align as f64).floor() as u64 * align
    } else {
        (raw / align as f64).ceil() as u64 * align
    };
    let on_its_side = if offset < 0.0 {
        bytes <= edge
    } else {
        bytes > edge
    };
    (bytes > 0 && on_its_side).then_some(bytes)
}

/// The measuring of one size of one key.
struct SizeJudge<'a> {
    backend: &'a mut dyn Backend,
    docs: &'a [Document],
    key: TableKey,
    settings: &'a VerifySettings,
    observer: &'a mut dyn Observer,
    /// Every measured point's [`stats::relative_noise`], for the run's noise.
    spreads: &'a mut Vec<f64>,
}

impl SizeJudge<'_> {
    /// Measures one size: the file's choice against its rival, or `None`
    /// when the choice gave a wrong result. Every candidate that gives a wrong
    /// result is added to `wrong`; one other than the choice is left out of
    /// the regret, so the key cannot pass (with NCCL, the baseline, left out,
    /// a table could look perfect against custom kernels alone).
    fn judge(
        &mut self,
        bytes: u64,
        kind: SizeKind,
        wrong: &mut Vec<WrongResult>,
    ) -> Result<Option<SizeRegret>, RunStatus> {
        let key = self.key;
        let chosen = effective_choice(&*self.backend, self.docs, key, bytes);
        let mut column = Column::new();
        candidates::first_look(
            &mut *self.backend,
            key,
            (bytes, PointOrigin::Grid),
            &self.settings.effort,
            &mut column,
            &mut *self.observer,
        )?;
        for (&algo, point) in &column {
            if algo != chosen
                && let Some(error) = &point.error
            {
                wrong.push(WrongResult {
                    bytes,
                    algo,
                    error: error.clone(),
                });
            }
        }
        if let Some(point) = column.get(&chosen).filter(|p| !p.usable()) {
            let error = point.error.clone().unwrap_or_default();
            wrong.push(WrongResult {
                bytes,
                algo: chosen,
                error,
            });
            return Ok(None);
        }
        let effort = &self.settings.effort;
        candidates::settle(
            &mut *self.backend,
            key,
            &mut column,
            effort.max_remeasure_rounds,
            effort,
        )
        .map_err(|(algo, e)| RunStatus::failed(key, algo, bytes, &e))?;
        self.note_spreads(&column);
        let rival = candidates::medians(&column)
            .into_iter()
            .filter(|&(algo, _)| algo != chosen)
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(algo, _)| algo);
        let confidence = self.settings.effort.confidence;
        let first = regret_of(&column, kind, chosen, rival, confidence);
        let Some(rival) = rival else {
            return Ok(Some(first));
        };
        let ratio = stats::ratio(
            &column[&chosen].samples_us,
            &column[&rival].samples_us,
            confidence,
        )
        .expect("both ran");
        // The first look decides only when it shows the choice faster than
        // its rival by more than the worst limit, with confidence: one round
        // each, and one slow round of the rival could hide a regret up to there.
        if ratio.high * (1.0 + self.settings.max_worst_regret) <= 1.0 {
            return Ok(Some(first));
        }
        self.interleaved(bytes, kind, chosen, rival).map(Some)
    }

    /// The choice and its rival from scratch, in interleaved rounds, until
    /// the regret's interval is clear of the limits (after `min_rounds`) or
    /// `max_rounds` are spent.
    fn interleaved(
        &mut self,
        bytes: u64,
        kind: SizeKind,
        chosen: Algo,
        rival: Algo,
    ) -> Result<SizeRegret, RunStatus> {
        let key = self.key;
        let settings = self.settings;
        self.observer.points_added(2);
        let both = [chosen, rival];
        let mut column = Column::new();
        for algo in both {
            let mut point = PointEvidence::new(bytes, algo, PointOrigin::Grid);
            point.verified = true;
            column.insert(algo, point);
        }
        let rounds = settings.max_rounds.max(1);
        let min_rounds = settings.min_rounds.min(rounds);
        let (reps, confidence) = (settings.effort.reps, settings.effort.confidence);
        let mut done = 0;
        let regret = loop {
            if self.observer.should_stop() {
                return Err(RunStatus::Interrupted);
            }
            candidates::interleaved_round(&mut *self.backend, key, &mut column, &both, done, reps)
                .map_err(|(algo, e)| RunStatus::failed(key, algo, bytes, &e))?;
            done += 1;
            let regret = regret_of(&column, kind, chosen, Some(rival), confidence);
            let clear = done >= min_rounds && clear_of_limits(&regret, kind, settings);
            if clear || done == rounds {
                break regret;
            }
        };
        for algo in both {
            self.observer.point_done(&key, bytes, algo);
        }
        self.note_spreads(&column);
        Ok(SizeRegret {
            rounds: done,
            ..regret
        })
    }

    fn note_spreads(&mut self, column: &Column) {
        for point in column.values().filter(|p| p.usable()) {
            self.spreads.push(stats::relative_noise(&point.samples_us));
        }
    }
}

/// The regret at a size of `kind` of `chosen` against `rival` (none where
/// nothing else runs: no regret) from the samples in `column`, with no
/// interleaved rounds (the caller fills those in).
fn regret_of(
    column: &Column,
    kind: SizeKind,
    chosen: Algo,
    rival: Option<Algo>,
    confidence: f64,
) -> SizeRegret {
    let c = &column[&chosen];
    let medians = candidates::medians(column);
    let ratio = rival.map(|rival| {
        stats::ratio(&c.samples_us, &column[&rival].samples_us, confidence)
            .expect("both have samples")
    });
    let excess = |x: f64| (x - 1.0).max(0.0);
    SizeRegret {
        bytes: c.bytes,
        kind,
        chosen,
        rival,
        chosen_us: medians[&chosen],
        rival_us: rival.map(|rival| medians[&rival]),
        regret: ratio.map_or(0.0, |r| excess(r.ratio)),
        low: ratio.map_or(0.0, |r| excess(r.low)),
        high: ratio.map_or(0.0, |r| excess(r.high)),
        rounds: 0,
    }
}

/// Whether no limit that applies at this size lies inside the interval: more
/// rounds could not change which side of it the size is on.
fn clear_of_limits(r: &SizeRegret, kind: SizeKind, settings: &VerifySettings) -> bool {
    let straddles = |limit: f64| r.low <= limit && limit < r.high;
    let median_open = !kind.is_edge() && straddles(settings.max_median_regret);
    !(straddles(settings.max_worst_regret) || median_open)
}

/// The file's selection at `bytes`, or the collective's fallback (NCCL, the
/// fused collective's unfused path) where the kernel would decline the size
/// at run time (over its capacity here, or misaligned).
fn effective_choice(backend: &dyn Backend, docs: &[Document], key: TableKey, bytes: u64) -> Algo {
    let platform = &docs[0].platform;
    let query = key.query(platform.arch, platform.link, bytes);
    let selected = interpret::select(docs, query);
    let runs = backend
        .candidates(key.collective, key.world_size, bytes)
        .contains(&selected);
    if runs {
        selected
    } else {
        key.collective.fallback()
    }
}

fn summarize(
    key: TableKey,
    sizes: Vec<SizeRegret>,
    wrong_results: Vec<WrongResult>,
    settings: &VerifySettings,
) -> KeyRegret {
    let spread = RegretSummary::of(sizes.iter().filter(|s| !s.kind.is_edge()));
    let edges = RegretSummary::worst_of(sizes.iter().filter(|s| s.kind.is_edge()));
    let worst = RegretSummary::worst_of(sizes.iter()).worst;
    let (verdict, reason) = if let Some(wrong) = wrong_results.first() {
        let at = crate::format::size(wrong.bytes);
        let reason = format!("{} gave a wrong result at {at}", wrong.algo.name());
        (Verdict::Fail, reason)
    } else {
        let worst = worst.expect("a judged key has sizes");
        let mut judged = vec![against("worst", worst, settings.max_worst_regret)];
        if let Some(median) = spread.median {
            judged.push(against("median", median, settings.max_median_regret));
        }
        [Verdict::Fail, Verdict::Inconclusive]
            .into_iter()
            .find_map(|v| judged.iter().find(|j| j.0 == v).cloned())
            .unwrap_or((Verdict::Pass, String::new()))
    };
    KeyRegret {
        key,
        sizes,
        wrong_results,
        spread,
        edges,
        worst,
        verdict,
        reason,
    }
}

/// How one regret estimate stands against its limit, and why.
fn against(name: &str, e: Estimate, limit: f64) -> (Verdict, String) {
    let (verdict, stands) = if e.low > limit {
        (Verdict::Fail, "above")
    } else if e.high <= limit {
        return (Verdict::Pass, String::new());
    } else {
        (Verdict::Inconclusive, "straddles")
    };
    let (value, low, high) = (
        crate::format::percent(e.value),
        crate::format::percent(e.low),
        crate::format::percent(e.high),
    );
    let figures = format!("{name} regret {value}, interval {low}–{high},");
    (
        verdict,
        format!(
            "{figures} {stands} the {} limit",
            crate::format::percent(limit)
        ),
    )
}

impl VerifyReport {
    /// The run's noise, then one block per key (its verdict, its spread and
    /// edge sizes, the sizes that cost the most), the skipped tables, and the
    /// verdict.
    pub fn render(&self) -> String {
        use crate::format::{micros, size};
        use std::fmt::Write;
        let mut out = String::new();
        if let Some(noise) = &self.noise {
            let _ = writeln!(
                out,
                "measured noise: a sample's spread is {} at the median point, {} at the 90th percentile ({} points)",
                crate::format::percent(noise.median),
                crate::format::percent(noise.p90),
                noise.points
            );
        }
        for key in &self.keys {
            let reason = if key.reason.is_empty() {
                String::new()
            } else {
                format!(": {}", key.reason)
            };
            let _ = writeln!(out, "{}: {}{reason}", key.key, key.verdict.name());
            if let (Some(median), Some(worst)) = (key.spread.median, key.spread.worst) {
                let _ = writeln!(
                    out,
                    "  {} spread sizes: regret median {median}, worst {worst}{}",
                    key.spread.sizes,
                    at(key.spread.worst_at, worst.value)
                );
            }
            if let Some(worst) = key.edges.worst {
                let _ = writeln!(
                    out,
                    "  {} edge sizes: regret worst {worst}{}",
                    key.edges.sizes,
                    at(key.edges.worst_at, worst.value)
                );
            }
            let mut costly: Vec<&SizeRegret> = key.sizes.iter().filter(|s| s.high > 0.0).collect();
            costly.sort_by(|a, b| b.high.total_cmp(&a.high));
            for s in costly.iter().take(3) {
                let rounds = match s.rounds {
                    0 => String::new(),
                    1 => ", 1 interleaved round".to_string(),
                    n => format!(", {n} interleaved rounds"),
                };
                let regret = Estimate {
                    value: s.regret,
                    low: s.low,
                    high: s.high,
                };
                let _ = writeln!(
                    out,
                    "  at {}{}: chose {} {}, {} {}: +{regret}{rounds}",
                    size(s.bytes),
                    where_(s.kind),
                    s.chosen.name(),
                    micros(Some(s.chosen_us)),
                    s.rival.map_or("-", |r| r.name()),
                    micros(s.rival_us),
                );
            }
            for wrong in &key.wrong_results {
                let _ = writeln!(
                    out,
                    "  at {}: {} gave a wrong result: {}",
                    size(wrong.bytes),
                    wrong.algo.name(),
                    wrong.error
                );
            }
        }
        for skipped in &self.skipped {
            let _ = writeln!(out, "{}: skipped ({})", skipped.key, skipped.reason);
        }
        match &self.status {
            RunStatus::Complete => {}
            RunStatus::Interrupted => {
                out.push_str("interrupted: the verdict covers only what was measured\n")
            }
            RunStatus::Failed(e) => {
                let _ = writeln!(out, "stopped by an error: {e}");
            }
        }
        let limits = format!(
            "limits: median {}, worst {}; {:.0}% intervals",
            crate::format::percent(self.settings.max_median_regret),
            crate::format::percent(self.settings.max_worst_regret),
            self.settings.effort.confidence * 100.0
        );
        match (self.verdict(), &self.nothing_judged) {
            (None, reason) => {
                let _ = writeln!(
                    out,
                    "nothing to judge: {}",
                    reason.as_deref().unwrap_or("no table was measured")
                );
            }
            (Some(Verdict::Inconclusive), _) => {
                let open = self
                    .keys
                    .iter()
                    .filter(|k| k.verdict == Verdict::Inconclusive)
                    .count();
                let _ = writeln!(
                    out,
                    "INCONCLUSIVE ({limits}): {open} of {} keys cannot be told from their limits at this noise; more --samples or --rounds, or a quieter machine, can decide them",
                    self.keys.len()
                );
            }
            (Some(verdict), _) => {
                let _ = writeln!(out, "{} ({limits})", verdict.name());
            }
        }
        out
    }

    /// The report as JSON (one document; regrets and noise as fractions,
    /// times in µs, sizes in bytes).
    pub fn to_json(&self) -> String {
        /// The limits a verdict is judged against.
        #[derive(Serialize)]
        struct Limits {
            median_regret: f64,
            worst_regret: f64,
            confidence: f64,
        }
        #[derive(Serialize)]
        struct Document<'a> {
            verdict: String,
            nothing_judged: &'a Option<String>,
            limits: Limits,
            noise: Option<Noise>,
            status: &'a RunStatus,
            keys: &'a [KeyRegret],
            skipped: &'a [Skipped],
        }
        crate::format::json(&Document {
            verdict: self
                .verdict()
                .map_or("nothing_to_judge".to_string(), |v| v.name().to_lowercase()),
            nothing_judged: &self.nothing_judged,
            limits: Limits {
                median_regret: self.settings.max_median_regret,
                worst_regret: self.settings.max_worst_regret,
                confidence: self.settings.effort.confidence,
            },
            noise: self.noise,
            status: &self.status,
            keys: &self.keys,
            skipped: &self.skipped,
        })
    }
}

/// ` at 2.50MiB`, when there is a regret to place.
fn at(bytes: Option<u64>, value: f64) -> String {
    match bytes {
        Some(b) if value > 0.0 => format!(" at {}", crate::format::size(b)),
        _ => String::new(),
    }
}

/// ` (3% past the edge at 4MiB)` for an edge size; nothing for a spread size.
fn where_(kind: SizeKind) -> String {
    match kind {
        SizeKind::Spread => String::new(),
        SizeKind::Edge { edge, offset } => format!(
            " ({:.0}% {} the edge at {})",
            offset.abs() * 100.0,
            if offset < 0.0 { "inside" } else { "past" },
            crate::format::size(edge)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::synthetic::{Drift, SyntheticBackend, SyntheticConfig};
    use crate::fit::{FitSettings, fit};
    use crate::observe::Quiet;
    use crate::sweep::{SweepSettings, sweep};
    use crate::tuned_file::build_document;
    use policy::Band;

    fn key() -> TableKey {
        TableKey {
            collective: Collective::AllReduce,
            world_size: 8,
            dtype: DType::Bf16,
            mode: Mode::Graph,
        }
    }

    fn size(bytes: u64, kind: SizeKind, regret: f64, low: f64, high: f64) -> SizeRegret {
        SizeRegret {
            bytes,
            kind,
            chosen: Algo::Nccl,
            rival: Some(Algo::OneShotPush),
            chosen_us: 10.0 * (1.0 + regret),
            rival_us: Some(10.0),
            regret,
            low,
            high,
            rounds: 2,
        }
    }

    const EDGE: SizeKind = SizeKind::Edge {
        edge: 1000,
        offset: 0.03,
    };

    #[test]
    fn the_verdict_follows_the_intervals() {
        let settings = VerifySettings::default();
        let spread = |regret, low, high| size(16, SizeKind::Spread, regret, low, high);
        let judge = |sizes| summarize(key(), sizes, Vec::new(), &settings);
        // Regrets clear of both limits.
        let pass = judge(vec![
            spread(0.0, 0.0, 0.0),
            size(32, EDGE, 0.02, 0.01, 0.04),
        ]);
        assert_eq!(pass.verdict, Verdict::Pass, "{}", pass.reason);
        // An edge size surely above the worst limit fails the key, though no
        // spread size sees it.
        let fail = judge(vec![
            spread(0.0, 0.0, 0.0),
            size(32, EDGE, 0.09, 0.07, 0.11),
        ]);
        assert_eq!(fail.verdict, Verdict::Fail);
        assert!(
            fail.reason
                .contains("worst regret 9.00%, interval 7.00%–11.00%, above the 5.00% limit"),
            "{}",
            fail.reason
        );
        assert_eq!(fail.spread.worst.unwrap().value, 0.0);
        assert!((fail.edges.worst.unwrap().value - 0.09).abs() < 1e-12);
        // An interval that straddles the limit is not a verdict either way,
        // and the estimate is reported as measured, not zeroed.
        let open = judge(vec![spread(0.03, 0.0, 0.08)]);
        assert_eq!(open.verdict, Verdict::Inconclusive);
        assert!((open.worst.unwrap().value - 0.03).abs() < 1e-12);
        assert!(
            open.reason.contains("straddles the 5.00% limit"),
            "{}",
            open.reason
        );
        // The median limit applies to the spread sizes.
        let median = judge(vec![
            spread(0.02, 0.015, 0.03),
            spread(0.02, 0.015, 0.03),
            size(32, EDGE, 0.0, 0.0, 0.0),
        ]);
        assert_eq!(median.verdict, Verdict::Fail);
        assert!(median.reason.contains("median regret"), "{}", median.reason);
        let wrong = summarize(
            key(),
            vec![spread(0.0, 0.0, 0.0)],
            vec![WrongResult {
                bytes: 16,
                algo: Algo::Nccl,
                error: "wrong sum".into(),
            }],
            &settings,
        );
        assert_eq!(wrong.verdict, Verdict::Fail);
    }

    #[test]
    fn edge_sizes_lie_on_both_sides_of_every_edge() {
        let table = tuned_schema::Table {
            key: key(),
            source: None,
            note: None,
            bands: vec![
                Band {
                    max: Some(32 * 1024),
                    algo: Algo::OneShotPush,
                },
                Band {
                    max: Some(4 << 20),
                    algo: Algo::TwoShotPull,
                },
                Band {
                    max: None,
                    algo: Algo::Nccl,
                },
            ],
        };
        let sizes = key_sizes(&table, 16, &VerifySettings::default());
        for edge in [32 * 1024u64, 4 << 20] {
            let near: Vec<(u64, f64)> = sizes
                .iter()
                .filter_map(|&(b, k)| match k {
                    SizeKind::Edge { edge: e, offset } if e == edge => Some((b, offset)),
                    _ => None,
                })
                .collect();
            assert_eq!(near.len(), 4, "{near:?}");
            for (bytes, offset) in near {
                assert_eq!(bytes % 16, 0);
                assert_eq!(offset < 0.0, bytes <= edge, "{bytes} {offset}");
                let off = bytes as f64 / edge as f64 - 1.0;
                assert!((off - offset).abs() < 0.001, "{bytes} is {off} from {edge}");
            }
        }
        let spread = sizes.iter().filter(|s| s.1 == SizeKind::Spread).count();
        assert_eq!(spread, grid::holdout_sizes(16, 256 << 20, 16).len());
        assert!(sizes.windows(2).all(|w| w[0].0 < w[1].0));
    }

    /// Slows every custom algorithm by `factor`: in its first measurement at
    /// each size only (a transient), or always (a real regression).
    struct Slowed {
        inner: SyntheticBackend,
        factor: f64,
        only_first: bool,
        seen: std::collections::HashSet<(Algo, u64)>,
    }

    impl Backend for Slowed {
        fn platform(&self) -> crate::backend::PlatformDesc {
            self.inner.platform()
        }
        fn world_sizes(&self) -> Vec<u32> {
            self.inner.world_sizes()
        }
        fn candidates(&self, collective: Collective, world_size: u32, bytes: u64) -> Vec<Algo> {
            self.inner.candidates(collective, world_size, bytes)
        }
        fn validate(
            &mut self,
            key: TableKey,
            algo: Algo,
            bytes: u64,
        ) -> Result<crate::backend::Validated, crate::backend::BackendError> {
            self.inner.validate(key, algo, bytes)
        }
        fn measure(
            &mut self,
            key: TableKey,
            algo: Algo,
            bytes: u64,
            reps: Repetitions,
        ) -> Result<Vec<f64>, crate::backend::BackendError> {
            let samples = self.inner.measure(key, algo, bytes, reps)?;
            let first = self.seen.insert((algo, bytes));
            let slow = algo.is_custom() && (first || !self.only_first);
            let factor = if slow { self.factor } else { 1.0 };
            Ok(samples.into_iter().map(|t| t * factor).collect())
        }
        fn estimated_point_seconds(
            &self,
            key: TableKey,
            algo: Algo,
            bytes: u64,
            reps: Repetitions,
        ) -> f64 {
            self.inner.estimated_point_seconds(key, algo, bytes, reps)
        }
    }

    fn fitted_document(config: SyntheticConfig) -> (Document, VerifySettings) {
        let sweep_settings = SweepSettings {
            collectives: vec![Collective::AllReduce],
            world_sizes: vec![8],
            dtypes: vec![DType::Bf16],
            modes: vec![Mode::Graph],
            max_bytes: 8 << 20,
            ..SweepSettings::default()
        };
        let mut backend = SyntheticBackend::new(config);
        let evidence = sweep(&mut backend, &sweep_settings, "2026-11-29", &mut Quiet)
            .unwrap()
            .evidence;
        let doc = build_document(
            &evidence,
            &fit(&evidence, &FitSettings::default()),
            None,
            Vec::new(),
        );
        let settings = VerifySettings {
            max_bytes: 8 << 20,
            ..VerifySettings::default()
        };
        (doc, settings)
    }

    /// One slow measurement of the chosen algorithm does not fail the table:
    /// the choice and its rival are measured again, interleaved; a slowdown
    /// that reproduces does fail it.
    #[test]
    fn a_failing_size_counts_only_if_it_reproduces() {
        let (doc, settings) = fitted_document(SyntheticConfig::planted(0.02, 4));
        let mut transient = Slowed {
            inner: SyntheticBackend::new(SyntheticConfig::planted(0.02, 4)),
            factor: 1.5,
            only_first: true,
            seen: Default::default(),
        };
        let report = verify(&mut transient, &doc, &settings, &mut Quiet).unwrap();
        assert_eq!(report.verdict(), Some(Verdict::Pass), "{}", report.render());
        let key = &report.keys[0];
        assert!(
            key.sizes
                .iter()
                .any(|s| s.rounds > 0 && s.rival == Some(Algo::Nccl)),
            "custom choices that looked slow were measured again: {}",
            report.render()
        );

        let mut persistent = Slowed {
            only_first: false,
            seen: Default::default(),
            ..transient
        };
        let report = verify(&mut persistent, &doc, &settings, &mut Quiet).unwrap();
        assert_eq!(report.verdict(), Some(Verdict::Fail), "{}", report.render());
        assert!(
            report.render().contains("interleaved rounds"),
            "{}",
            report.render()
        );
    }

    /// A fitted table passes on the platform it was fitted on; the same table
    /// with NCCL everywhere does not.
    #[test]
    fn fitted_tables_pass_and_naive_ones_fail() {
        let (mut doc, settings) = fitted_document(SyntheticConfig::planted(0.02, 4));
        let mut backend = SyntheticBackend::new(SyntheticConfig::planted(0.02, 4));
        let report = verify(&mut backend, &doc, &settings, &mut Quiet).unwrap();
        assert_eq!(report.verdict(), Some(Verdict::Pass), "{}", report.render());
        assert!(report.keys[0].edges.sizes >= 8, "{}", report.render());
        let noise = report.noise.unwrap();
        assert!(
            (noise.median - 0.02).abs() < 0.006,
            "2% noise is measured as such: {noise:?}"
        );
        assert!(report.render().contains("measured noise: "));

        doc.tables[0].bands = vec![Band {
            max: None,
            algo: Algo::Nccl,
        }];
        let report = verify(&mut backend, &doc, &settings, &mut Quiet).unwrap();
        assert_eq!(report.verdict(), Some(Verdict::Fail));
        let key = &report.keys[0];
        assert!(
            key.worst.unwrap().low > 1.0,
            "NCCL at 20 B is many times slower: {}",
            report.render()
        );
        assert!(report.render().contains("FAIL"));
    }

    /// An edge 20 % too high gives the sizes just below it to the wrong
    /// algorithm. The spread sizes of this key lie too far from the edge to see
    /// it; the edge sizes do.
    #[test]
    fn an_edge_in_the_wrong_place_is_seen_at_the_edge_sizes() {
        // All-reduce nominal lines: push → pull at 32 KiB. The nearest spread
        // sizes are 28 and 40 KiB; an edge at 38 KiB (+19 %) leaves them right.
        let config = SyntheticConfig::nominal(0.02, 6);
        let mut backend = SyntheticBackend::new(config);
        let (mut doc, settings) = fitted_document(SyntheticConfig::nominal(0.02, 6));
        let bands = &mut doc.tables[0].bands;
        assert_eq!(bands[0].algo, Algo::OneShotPush, "{bands:?}");
        bands[0].max = Some(38 * 1024);
        let report = verify(&mut backend, &doc, &settings, &mut Quiet).unwrap();
        let key = &report.keys[0];
        assert_eq!(key.verdict, Verdict::Fail, "{}", report.render());
        let spread = key.spread.worst.unwrap();
        assert!(spread.high <= 0.05, "{}", report.render());
        let edges = key.edges.worst.unwrap();
        assert!(edges.low > 0.05, "{}", report.render());
        let at = key.edges.worst_at.unwrap();
        assert!((36 * 1024..=38 * 1024).contains(&at), "{}", report.render());
    }

    /// On a machine whose speed drifts by more than the worst limit during
    /// the run, a correct table still passes: its choice and the rival are
    /// measured in the same rounds (the mechanism is tested in `candidates`).
    #[test]
    fn a_correct_table_passes_on_a_drifting_machine() {
        let drifting = || {
            let mut config = SyntheticConfig::nominal(0.005, 12);
            config.drift = Some(Drift {
                amplitude: 0.08,
                period_samples: 1000.0,
                phase: 1.0,
            });
            config
        };
        let (doc, settings) = fitted_document(SyntheticConfig::nominal(0.005, 12));
        let report = verify(
            &mut SyntheticBackend::new(drifting()),
            &doc,
            &settings,
            &mut Quiet,
        )
        .unwrap();
        assert_eq!(report.verdict(), Some(Verdict::Pass), "{}", report.render());
        // The drift matters at this time scale: blocks of 8 rounds of the
        // same algorithm disagree by more than the worst limit.
        let mut backend = SyntheticBackend::new(drifting());
        let reps = settings.effort.reps;
        let blocks: Vec<f64> = (0..6)
            .map(|_| {
                let samples: Vec<f64> = (0..8)
                    .flat_map(|_| backend.measure(key(), Algo::Nccl, 1 << 20, reps).unwrap())
                    .collect();
                stats::median(&samples)
            })
            .collect();
        let range = blocks.iter().copied().fold(0.0, f64::max)
            / blocks.iter().copied().fold(f64::INFINITY, f64::min)
            - 1.0;
        assert!(range > 0.05, "blocks apart by {range}");
    }

    /// A table cannot pass when a candidate it did not choose gave wrong
    /// results: with NCCL (the baseline) left out, the regret would be judged
    /// against custom kernels alone (a checker too strict for NCCL's rounding
    /// fails NCCL so).
    #[test]
    fn a_broken_baseline_fails_the_verdict() {
        let (doc, settings) = fitted_document(SyntheticConfig::planted(0.02, 4));
        let mut config = SyntheticConfig::planted(0.02, 4);
        config.broken = vec![(Collective::AllReduce, Algo::Nccl)];
        let mut backend = SyntheticBackend::new(config);
        let report = verify(&mut backend, &doc, &settings, &mut Quiet).unwrap();
        assert_eq!(report.verdict(), Some(Verdict::Fail), "{}", report.render());
        assert!(
            report.render().contains("nccl gave a wrong result"),
            "{}",
            report.render()
        );
    }

    /// A run with nothing to judge says why, and lists what it skipped.
    #[test]
    fn nothing_to_judge_says_why() {
        let (doc, _) = fitted_document(SyntheticConfig::planted(0.02, 4));
        let mut backend = SyntheticBackend::new(SyntheticConfig::planted(0.02, 4));
        let only = |world_sizes: Vec<u32>, min_bytes: u64, max_bytes: u64| VerifySettings {
            world_sizes,
            min_bytes,
            max_bytes,
            ..VerifySettings::default()
        };
        let report = verify(&mut backend, &doc, &only(vec![3], 16, 1 << 20), &mut Quiet).unwrap();
        assert_eq!(report.verdict(), None);
        let text = report.render();
        assert!(
            text.contains(
                "nothing to judge: no table of the file matches --world-sizes 3 (its tables have world sizes 8)"
            ),
            "{text}"
        );
        assert!(!text.contains("PASS") && !text.contains("FAIL"), "{text}");

        let report = verify(&mut backend, &doc, &only(vec![], 16, 16), &mut Quiet).unwrap();
        let text = report.render();
        assert!(
            text.contains(
                "all_reduce ws8 bf16 graph: skipped (no held-out size between 16B and 16B)"
            ),
            "{text}"
        );
        assert!(
            text.contains("nothing to judge: every selected table was skipped"),
            "{text}"
        );
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["verdict"], "nothing_to_judge");
        assert_eq!(json["skipped"][0]["key"]["world_size"], 8);

        let mut empty = doc.clone();
        empty.tables.clear();
        let report = verify(&mut backend, &empty, &VerifySettings::default(), &mut Quiet).unwrap();
        assert!(
            report
                .render()
                .contains("nothing to judge: the file has no [[table]]"),
            "{}",
            report.render()
        );
    }

    #[test]
    fn the_json_report_has_every_size_and_verdict() {
        let (doc, settings) = fitted_document(SyntheticConfig::planted(0.02, 4));
        let mut backend = SyntheticBackend::new(SyntheticConfig::planted(0.02, 4));
        let report = verify(&mut backend, &doc, &settings, &mut Quiet).unwrap();
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["verdict"], "pass");
        assert_eq!(json["status"], "complete");
        let key = &json["keys"][0];
        assert_eq!(key["key"]["collective"], "all_reduce");
        assert_eq!(key["verdict"], "pass");
        let sizes = key["sizes"].as_array().unwrap();
        assert_eq!(sizes.len(), report.keys[0].sizes.len());
        assert!(
            sizes
                .iter()
                .any(|s| s["kind"] == "edge" && s["edge_offset"] == -0.03)
        );
        assert!(json["noise"]["median"].as_f64().unwrap() > 0.0);
        assert_eq!(json["limits"]["worst_regret"], 0.05);
    }
}
