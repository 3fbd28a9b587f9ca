//! The evidence file: every timing sample a sweep took, per key, size and
//! algorithm, with the platform's provenance and the sweep's settings. `fit`
//! derives bands from it alone, so a reviewer can re-fit every band of a
//! `tuned/*.toml` without a GPU. The format is versioned and documented in
//! `tuner/EVIDENCE.md`; this module is its one definition in code.

use std::collections::BTreeMap;
use std::path::Path;

use policy::{Algo, Arch, CapacityEntry, Collective, DType, Link, Mode, TableKey};
use serde::{Deserialize, Serialize};

use crate::json_layout;

/// The version this tuner reads and writes. Bump it on any change that an
/// older reader would misread; EVIDENCE.md keeps the history.
pub const EVIDENCE_VERSION: u32 = 1;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    pub evidence_version: u32,
    pub platform: MeasuredPlatform,
    pub settings: SettingsRecord,
    /// False when the sweep was interrupted (Ctrl-C) or stopped on an error:
    /// the keys below are then what was measured before it stopped.
    pub complete: bool,
    pub keys: Vec<KeyEvidence>,
}

/// What was measured, and with which software, for the TOML's provenance.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MeasuredPlatform {
    pub arch: Arch,
    pub link: Link,
    /// Marketing name as the driver reports it, e.g. "NVIDIA H200".
    pub gpu: String,
    /// `gpu` or `synthetic`: where the samples came from.
    pub backend: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub tuner_version: String,
    /// ISO date of the sweep (UTC), e.g. "2026-11-29".
    pub date: String,
    /// The capacities the custom kernels had during the sweep: `fit` never lets
    /// a band of a custom algorithm reach past them.
    pub capacities: Vec<CapacityEntry>,
}

/// How the sweep was run; recorded so that a re-fit or a reviewer knows what the
/// samples mean.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsRecord {
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// Timed samples per point in the first round (re-measures add more).
    pub samples: u32,
    /// Untimed calls before the first sample of every point.
    pub warmup: u32,
    /// The margin: the fastest candidate at a size and the runner-up get
    /// more rounds while the interval of their ratio holds one minus this…
    pub remeasure_threshold: f64,
    /// …at most this many at a grid point.
    pub max_remeasure_rounds: u32,
    /// Probing stops when neighbouring probes are this close (a fraction).
    pub bisect_resolution: f64,
    /// The extra rounds of `max_remeasure_rounds`, at a probe.
    pub max_probe_rounds: u32,
    /// Seed of the synthetic backend; absent for GPU sweeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The memory budget per rank the worlds were measured under (their
    /// capacities capped as `kernels` caps them); absent: unbounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_budget: Option<u64>,
}

/// All points of one table key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEvidence {
    pub collective: Collective,
    pub world_size: u32,
    pub dtype: DType,
    pub mode: Mode,
    /// The fused collective's key swept again at other hidden sizes (`sweep
    /// --hidden`): what its bands, fitted from `points`, cost there. Absent
    /// for every other key, and for a fused key swept at one hidden size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<HiddenSizes>,
    /// Sorted by size, then algorithm.
    pub points: Vec<PointEvidence>,
}

/// A fused key's bands judged at the other hidden sizes of its sweep
/// ([`crate::hidden`]): its tables are keyed by bytes, so whether they hold
/// at another hidden size is measured, and the table's note says it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HiddenSizes {
    /// The hidden size (elements of a row) the key's points were measured
    /// at: the one its bands are fitted for.
    pub fitted_at: usize,
    /// What was found at each other hidden size, in the order swept.
    pub others: Vec<HiddenFinding>,
}

/// What the bands fitted at [`HiddenSizes::fitted_at`] cost at another
/// hidden size: `worst_cost` is the largest excess, over the sizes measured
/// there, of the band's algorithm's median over the fastest one's (a
/// fraction, to a millionth), at `worst_at` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case", deny_unknown_fields)]
pub enum HiddenFinding {
    /// At most the sweep's margin everywhere: the bands hold there.
    Holds {
        hidden: usize,
        worst_cost: f64,
        worst_at: u64,
    },
    /// More than the margin at `worst_at`: the crossovers move.
    Moves {
        hidden: usize,
        worst_cost: f64,
        worst_at: u64,
    },
    NotJudged {
        hidden: usize,
        why: Unjudged,
    },
}

/// Why a fused key's bands were not judged at another hidden size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unjudged {
    /// The key had no usable point there: nothing to compare with.
    NoUsablePoint,
    /// No size measured there had a usable point of the band's algorithm.
    BandsUnmeasured,
}

impl HiddenFinding {
    pub fn hidden(&self) -> usize {
        match *self {
            HiddenFinding::Holds { hidden, .. }
            | HiddenFinding::Moves { hidden, .. }
            | HiddenFinding::NotJudged { hidden, .. } => hidden,
        }
    }

    /// The worst cost, where the bands were judged.
    fn worst_cost(&self) -> Option<f64> {
        match *self {
            HiddenFinding::Holds { worst_cost, .. } | HiddenFinding::Moves { worst_cost, .. } => {
                Some(worst_cost)
            }
            HiddenFinding::NotJudged { .. } => None,
        }
    }
}

impl HiddenSizes {
    /// Each hidden size once, costs that are fractions.
    fn check(&self) -> Result<(), String> {
        let mut seen = std::collections::BTreeSet::from([self.fitted_at]);
        for finding in &self.others {
            let hidden = finding.hidden();
            if !seen.insert(hidden) {
                return Err(format!("hidden {hidden} appears twice"));
            }
            if let Some(cost) = finding.worst_cost()
                && !(cost.is_finite() && cost >= 0.0)
            {
                return Err(format!("hidden {hidden} has a worst_cost of {cost}"));
            }
        }
        Ok(())
    }
}

/// The samples of one algorithm at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PointEvidence {
    /// Output bytes of the collective (for all-gather: all ranks' shares).
    pub bytes: u64,
    pub algo: Algo,
    pub origin: PointOrigin,
    /// Whether the algorithm's result was checked against the reference
    /// before timing (and matched). False with an `error`: it did not match or
    /// the kernel declined the size; the point has no samples and is never
    /// chosen. False without an `error`: not checked (the size is above the
    /// sweep's verification limit), timed all the same.
    pub verified: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Per-call time in µs, the maximum over ranks, one value per sample, in
    /// the order measured.
    pub samples_us: Vec<f64>,
}

/// Why a size was measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointOrigin {
    /// On the sweep grid (powers of two and 1.5× points).
    Grid,
    /// A probe between two grid points where the fastest algorithm changed.
    Bisect,
}

impl PointEvidence {
    /// A point of `algo` at `bytes` not yet verified or timed.
    pub fn new(bytes: u64, algo: Algo, origin: PointOrigin) -> PointEvidence {
        PointEvidence {
            bytes,
            algo,
            origin,
            verified: false,
            error: None,
            samples_us: Vec::new(),
        }
    }

    /// Has samples and did not fail verification: `fit` may choose it.
    pub fn usable(&self) -> bool {
        self.error.is_none() && !self.samples_us.is_empty()
    }
}

impl KeyEvidence {
    pub fn new(key: TableKey) -> KeyEvidence {
        KeyEvidence {
            collective: key.collective,
            world_size: key.world_size,
            dtype: key.dtype,
            mode: key.mode,
            hidden: None,
            points: Vec::new(),
        }
    }

    pub fn key(&self) -> TableKey {
        TableKey {
            collective: self.collective,
            world_size: self.world_size,
            dtype: self.dtype,
            mode: self.mode,
        }
    }

    /// Measured sizes, ascending, each with its points.
    pub fn by_size(&self) -> BTreeMap<u64, Vec<&PointEvidence>> {
        let mut sizes: BTreeMap<u64, Vec<&PointEvidence>> = BTreeMap::new();
        for point in &self.points {
            sizes.entry(point.bytes).or_default().push(point);
        }
        sizes
    }
}

impl Evidence {
    /// The points (and findings) of `key`, if it was swept.
    pub fn of_key(&self, key: TableKey) -> Option<&KeyEvidence> {
        self.keys.iter().find(|k| k.key() == key)
    }

    /// Every (key, algorithm) with points that failed their check or could not
    /// run, in key order. Such points have no samples, so the fit leaves that
    /// algorithm out at those sizes: where it is NCCL, the baseline, the bands
    /// there were never compared with it.
    pub fn failed_checks(&self) -> Vec<FailedChecks> {
        let mut out: Vec<FailedChecks> = Vec::new();
        for key in &self.keys {
            for point in &key.points {
                let Some(error) = &point.error else { continue };
                let key_text = key.key().to_string();
                match out
                    .iter_mut()
                    .find(|f| f.key == key_text && f.algo == point.algo)
                {
                    Some(group) => group.sizes += 1,
                    None => out.push(FailedChecks {
                        key: key_text,
                        algo: point.algo,
                        sizes: 1,
                        first_bytes: point.bytes,
                        first_error: error.clone(),
                    }),
                }
            }
        }
        out
    }

    /// The canonical text: pretty JSON with one point per line, so a review
    /// diff shows which points changed. Deterministic for equal values.
    pub fn to_json(&self) -> String {
        json_layout::to_string(self, 5)
    }

    /// Parses evidence text; `path` only names the file in the error, which
    /// says why the text is no evidence (`path: why`).
    pub fn from_json(path: &str, text: &str) -> Result<Evidence, String> {
        let error = |message: String| format!("{path}: {message}");
        // Read the version on its own first, so a file from another version
        // gets a clear message instead of a complaint about some field.
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| error(format!("not JSON: {e}")))?;
        let kind = match &value {
            serde_json::Value::Object(_) => None,
            serde_json::Value::Array(_) => Some("an array"),
            serde_json::Value::String(_) => Some("a string"),
            serde_json::Value::Number(_) => Some("a number"),
            serde_json::Value::Bool(_) => Some("a boolean"),
            serde_json::Value::Null => Some("null"),
        };
        if let Some(kind) = kind {
            return Err(error(format!(
                "not an evidence file: expected a JSON object with `evidence_version`, found {kind}"
            )));
        }
        match value.get("evidence_version") {
            None => return Err(error("missing `evidence_version`".to_string())),
            Some(v) if v.as_u64() == Some(u64::from(EVIDENCE_VERSION)) => {}
            Some(v) => {
                return Err(error(format!(
                    "evidence_version {v} is not supported by this tuner (it reads version {EVIDENCE_VERSION})"
                )));
            }
        }
        let evidence: Evidence =
            serde_json::from_str(text).map_err(|e| error(format!("invalid evidence: {e}")))?;
        evidence.check().map_err(error)?;
        Ok(evidence)
    }

    /// The evidence file at `path`; the error is as [`Evidence::from_json`]'s.
    pub fn load(path: &Path) -> Result<Evidence, String> {
        let name = path.display().to_string();
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
        Evidence::from_json(&name, &text)
    }

    /// Facts serde cannot check: sane values, no duplicated keys or points.
    fn check(&self) -> Result<(), String> {
        let mut seen_keys = std::collections::BTreeSet::new();
        for key in &self.keys {
            let name = key.key();
            if key.world_size == 0 {
                return Err(format!("{name}: world_size must be at least 1"));
            }
            if !seen_keys.insert(key.key()) {
                return Err(format!("{name}: key appears twice"));
            }
            if let Some(hidden) = &key.hidden {
                if key.collective != Collective::AllReduceAddRmsNorm {
                    return Err(format!(
                        "{name}: only {} has hidden sizes",
                        Collective::AllReduceAddRmsNorm.name()
                    ));
                }
                hidden.check().map_err(|e| format!("{name}: {e}"))?;
            }
            let mut seen_points = std::collections::BTreeSet::new();
            for point in &key.points {
                if !point.algo.implements(key.collective) {
                    return Err(format!(
                        "{name}: {} does not implement {}",
                        point.algo.name(),
                        key.collective.name()
                    ));
                }
                if !seen_points.insert((point.bytes, point.algo)) {
                    return Err(format!(
                        "{name}: {} at {} bytes appears twice",
                        point.algo.name(),
                        point.bytes
                    ));
                }
                if let Some(bad) = point
                    .samples_us
                    .iter()
                    .find(|s| !(s.is_finite() && **s > 0.0))
                {
                    return Err(format!(
                        "{name}: {} at {} bytes has a sample of {bad} µs",
                        point.algo.name(),
                        point.bytes
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Points of one algorithm in one key that failed their check (see
/// [`Evidence::failed_checks`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FailedChecks {
    pub key: String,
    pub algo: Algo,
    /// How many sizes failed.
    pub sizes: usize,
    /// The smallest of them, and why it failed.
    pub first_bytes: u64,
    pub first_error: String,
}

impl FailedChecks {
    /// One warning line for a person reviewing the table.
    pub fn warning(&self) -> String {
        let consequence = if !self.algo.is_custom() {
            "it is the baseline (NCCL, or the fused collective's unfused path): the bands at \
             those sizes were never compared with it; find out why before committing this table"
        } else {
            "left out of the fit at those sizes"
        };
        let first_error: String = self.first_error.chars().take(160).collect();
        format!(
            "warning: {} {} failed its check at {} size(s), first at {} bytes ({first_error}); {consequence}",
            self.key,
            self.algo.name(),
            self.sizes,
            self.first_bytes,
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use policy::Capacity;

    #[test]
    fn failed_checks_are_grouped_and_nccl_is_called_the_baseline() {
        let mut evidence = sample_evidence();
        let nccl_failure = |bytes| PointEvidence {
            bytes,
            algo: Algo::Nccl,
            origin: PointOrigin::Grid,
            verified: false,
            error: Some("verification failed: 3 of 8 bf16 elements wrong".into()),
            samples_us: vec![],
        };
        evidence.keys[0].points.push(nccl_failure(32));
        evidence.keys[0].points.push(nccl_failure(64));
        let failed = evidence.failed_checks();
        assert_eq!(failed.len(), 2, "{failed:?}");
        assert_eq!((failed[0].algo, failed[0].sizes), (Algo::OneShotPush, 1));
        assert_eq!(
            (failed[1].algo, failed[1].sizes, failed[1].first_bytes),
            (Algo::Nccl, 2, 32)
        );
        let warning = failed[1].warning();
        assert!(
            warning.starts_with("warning: all_reduce ws8 bf16 graph nccl failed"),
            "{warning}"
        );
        assert!(warning.contains("baseline"), "{warning}");
        assert!(!failed[0].warning().contains("baseline"));
        // Points that were not checked (above the verification limit) are no failure.
        let mut clean = sample_evidence();
        clean.keys[0].points.retain(|p| p.error.is_none());
        clean.keys[0].points[0].verified = false;
        assert!(clean.failed_checks().is_empty());
    }

    pub(crate) fn sample_evidence() -> Evidence {
        Evidence {
            evidence_version: EVIDENCE_VERSION,
            platform: MeasuredPlatform {
                arch: Arch::SM90,
                link: Link::NvLink,
                gpu: "NVIDIA H200".into(),
                backend: "gpu".into(),
                driver: Some("580.65".into()),
                cuda: Some("13.0".into()),
                nccl: Some("2.28.3".into()),
                host: None,
                tuner_version: "0.1.0".into(),
                date: "2026-11-29".into(),
                capacities: vec![CapacityEntry {
                    collective: Collective::AllReduce,
                    algo: Algo::OneShotPush,
                    capacity: Capacity {
                        max_bytes: 8 << 20,
                        align: 16,
                    },
                }],
            },
            settings: SettingsRecord {
                min_bytes: 16,
                max_bytes: 1024,
                samples: 3,
                warmup: 2,
                remeasure_threshold: 0.03,
                max_remeasure_rounds: 2,
                bisect_resolution: 0.02,
                max_probe_rounds: 3,
                seed: None,
                memory_budget: None,
            },
            complete: true,
            keys: vec![KeyEvidence {
                collective: Collective::AllReduce,
                world_size: 8,
                dtype: DType::Bf16,
                mode: Mode::Graph,
                hidden: None,
                points: vec![
                    PointEvidence {
                        bytes: 16,
                        algo: Algo::Nccl,
                        origin: PointOrigin::Grid,
                        verified: true,
                        error: None,
                        samples_us: vec![20.5, 21.0, 20.25],
                    },
                    PointEvidence {
                        bytes: 16,
                        algo: Algo::OneShotPush,
                        origin: PointOrigin::Grid,
                        verified: false,
                        error: Some("rank 3: element 0 is 1.0, expected 8.0".into()),
                        samples_us: vec![],
                    },
                ],
            }],
        }
    }

    #[test]
    fn json_round_trips_and_keeps_points_on_one_line() {
        let evidence = sample_evidence();
        let text = evidence.to_json();
        assert_eq!(Evidence::from_json("e.json", &text).unwrap(), evidence);
        assert!(
            text.contains(
                r#"{"bytes": 16, "algo": "nccl", "origin": "grid", "verified": true, "samples_us": [20.5, 21.0, 20.25]}"#
            ),
            "{text}"
        );
        assert!(text.contains("\n  \"evidence_version\": 1,\n"), "{text}");
        assert!(!text.contains("hidden"), "no key has hidden sizes: {text}");
    }

    /// A fused key swept at three hidden sizes, judged at the other two.
    fn fused_evidence() -> Evidence {
        let mut evidence = sample_evidence();
        let mut fused = KeyEvidence::new(TableKey {
            collective: Collective::AllReduceAddRmsNorm,
            ..evidence.keys[0].key()
        });
        fused.hidden = Some(HiddenSizes {
            fitted_at: 4096,
            others: vec![
                HiddenFinding::Holds {
                    hidden: 2048,
                    worst_cost: 0.0092,
                    worst_at: 1 << 20,
                },
                HiddenFinding::Moves {
                    hidden: 8192,
                    worst_cost: 0.062,
                    worst_at: 256 << 10,
                },
                HiddenFinding::NotJudged {
                    hidden: 1024,
                    why: Unjudged::NoUsablePoint,
                },
            ],
        });
        evidence.keys.push(fused);
        evidence
    }

    #[test]
    fn hidden_sizes_round_trip_as_data() {
        let evidence = fused_evidence();
        let text = evidence.to_json();
        assert_eq!(Evidence::from_json("e.json", &text).unwrap(), evidence);
        assert!(
            text.contains(
                "\n      \"hidden\": {\n        \"fitted_at\": 4096,\n        \"others\": [\
                 {\"verdict\": \"holds\", \"hidden\": 2048, \"worst_cost\": 0.0092, \"worst_at\": 1048576}, \
                 {\"verdict\": \"moves\", \"hidden\": 8192, \"worst_cost\": 0.062, \"worst_at\": 262144}, \
                 {\"verdict\": \"not_judged\", \"hidden\": 1024, \"why\": \"no_usable_point\"}]\n      },\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn bad_hidden_sizes_are_refused() {
        let text = fused_evidence().to_json();
        let typo = text.replacen("\"worst_at\"", "\"worst_bytes\"", 1);
        let err = Evidence::from_json("e.json", &typo).unwrap_err();
        assert!(err.contains("unknown field `worst_bytes`"), "{err}");

        let mut evidence = fused_evidence();
        let fused = evidence.keys[1].hidden.take();
        evidence.keys[0].hidden = fused;
        let err = Evidence::from_json("e.json", &evidence.to_json()).unwrap_err();
        assert!(
            err.contains("only all_reduce_add_rmsnorm has hidden sizes"),
            "{err}"
        );

        let twice = text.replacen("\"hidden\": 8192", "\"hidden\": 4096", 1);
        let err = Evidence::from_json("e.json", &twice).unwrap_err();
        assert!(err.contains("hidden 4096 appears twice"), "{err}");
    }

    #[test]
    fn what_is_not_an_evidence_object_is_named() {
        for (text, says) in [
            ("[]", "found an array"),
            ("[1, 2]", "found an array"),
            ("3", "found a number"),
            ("nope", "not JSON"),
            ("{}", "missing `evidence_version`"),
            (
                "{\"evidence_version\": \"1\"}",
                "evidence_version \"1\" is not supported",
            ),
        ] {
            let err = Evidence::from_json("e.json", text).unwrap_err().to_string();
            assert!(err.contains(says), "{text}: {err}");
            assert!(!err.contains("VersionOnly"), "{err}");
        }
    }

    #[test]
    fn other_versions_are_refused_clearly() {
        let text = sample_evidence()
            .to_json()
            .replace("\"evidence_version\": 1", "\"evidence_version\": 7");
        let err = Evidence::from_json("e.json", &text).unwrap_err();
        assert!(
            err.to_string()
                .contains("evidence_version 7 is not supported"),
            "{err}"
        );
    }

    #[test]
    fn bad_vocabulary_and_samples_are_refused() {
        let text = sample_evidence().to_json();
        let bad_algo = text.replacen("\"algo\": \"nccl\"", "\"algo\": \"ring\"", 1);
        let err = Evidence::from_json("e.json", &bad_algo).unwrap_err();
        assert!(err.contains("unknown algorithm `ring`"), "{err}");

        let mut evidence = sample_evidence();
        evidence.keys[0].points[0].samples_us[1] = -1.0;
        let err = Evidence::from_json("e.json", &evidence.to_json()).unwrap_err();
        assert!(err.contains("sample of -1"), "{err}");

        let mut evidence = sample_evidence();
        let dup = evidence.keys[0].points[0].clone();
        evidence.keys[0].points.push(dup);
        let err = Evidence::from_json("e.json", &evidence.to_json()).unwrap_err();
        assert!(err.contains("appears twice"), "{err}");
    }
}
