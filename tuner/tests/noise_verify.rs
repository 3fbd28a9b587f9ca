//! `verify` does not fool itself at high noise: over many seeds, on tables
//! whose edges were moved by random amounts (so that some truly fail), a
//! key it calls PASS truly passes and a key it calls FAIL truly fails, where
//! "truly" is the noise-free model at the very sizes `verify` measured. What
//! it cannot tell at that noise it calls INCONCLUSIVE.

use policy::{Algo, Collective, DType, Mode};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tuner::backend::synthetic::{SyntheticBackend, SyntheticConfig};
use tuner::backend::{Backend, Repetitions};
use tuner::fit::{FitSettings, fit};
use tuner::observe::Quiet;
use tuner::sweep::{SweepSettings, sweep};
use tuner::tuned_file::build_document;
use tuner::verify::{Verdict, VerifySettings, verify};

const MAX_BYTES: u64 = 16 << 20;

fn sweep_settings() -> SweepSettings {
    SweepSettings {
        collectives: vec![Collective::AllReduce, Collective::AllGather],
        world_sizes: vec![8],
        dtypes: vec![DType::Bf16],
        modes: Mode::ALL.to_vec(),
        max_bytes: MAX_BYTES,
        reps: Repetitions {
            samples: 25,
            warmup: 0,
        },
        ..SweepSettings::default()
    }
}

/// Per key: verify's verdict, and the true worst regret (any size) and true
/// median regret (spread sizes) at the sizes it measured.
struct Judged {
    verdict: Verdict,
    worst: f64,
    median: f64,
    text: String,
}

fn judge(noise: f64, seed: u64) -> Vec<Judged> {
    // A table fitted on a quiet machine, then every inner edge moved by a
    // factor between 0.85 and 1.18: some keys stay within the limits, others
    // give sizes near an edge to the wrong algorithm.
    let mut quiet = SyntheticBackend::new(SyntheticConfig::planted(0.01, seed));
    let evidence = sweep(&mut quiet, &sweep_settings(), "2026-01-01", &mut Quiet)
        .unwrap()
        .evidence;
    let mut doc = build_document(
        &evidence,
        &fit(&evidence, &FitSettings::default()),
        None,
        Vec::new(),
    );
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for table in &mut doc.tables {
        let edges = table.bands.len() - 1;
        for i in 0..edges {
            let max = table.bands[i].max.unwrap() as f64 * rng.random_range(0.85..1.18);
            let below = if i == 0 {
                0
            } else {
                table.bands[i - 1].max.unwrap()
            };
            let above = table
                .bands
                .get(i + 1)
                .and_then(|b| b.max)
                .unwrap_or(u64::MAX);
            let max = (max as u64 / 4096 * 4096).clamp(below + 4096, above.saturating_sub(4096));
            table.bands[i].max = Some(max);
        }
    }
    let config = SyntheticConfig::planted(noise, seed);
    let mut backend = SyntheticBackend::new(config);
    let settings = VerifySettings {
        max_bytes: MAX_BYTES,
        effort: tuner::candidates::Effort {
            reps: Repetitions {
                samples: 25,
                warmup: 0,
            },
            ..VerifySettings::default().effort
        },
        ..VerifySettings::default()
    };
    let report = verify(&mut backend, &doc, &settings, &mut Quiet).unwrap();
    let text = report.render();
    report
        .keys
        .iter()
        .map(|k| {
            let truth = |bytes: u64, chosen: Algo| {
                let time = |a| backend.model_time_us(k.key, a, bytes).unwrap();
                let best = backend
                    .candidates(k.key.collective, k.key.world_size, bytes)
                    .into_iter()
                    .map(time)
                    .fold(f64::INFINITY, f64::min);
                time(chosen) / best - 1.0
            };
            let all: Vec<f64> = k.sizes.iter().map(|s| truth(s.bytes, s.chosen)).collect();
            let spread: Vec<f64> = k
                .sizes
                .iter()
                .filter(|s| !s.kind.is_edge())
                .map(|s| truth(s.bytes, s.chosen))
                .collect();
            Judged {
                verdict: k.verdict,
                worst: all.iter().copied().fold(0.0, f64::max),
                median: tuner::stats::median(&spread),
                text: text.clone(),
            }
        })
        .collect()
}

/// A verdict is wrong when it contradicts the truth by more than `slack`
/// (each size's interval is 95 %, so a regret right at a limit may land on
/// either side of it).
fn check(noise: f64, seeds: std::ops::Range<u64>) -> Counts {
    let slack = 0.005;
    let mut counts = Counts::default();
    let mut wrong = Vec::new();
    for seed in seeds {
        for j in judge(noise, seed) {
            let fails = j.worst > 0.05 || j.median > 0.01;
            counts.keys += 1;
            counts.failing += usize::from(fails);
            counts.caught += usize::from(fails && j.verdict == Verdict::Fail);
            counts.passed += usize::from(!fails && j.verdict == Verdict::Pass);
            counts.inconclusive += usize::from(j.verdict == Verdict::Inconclusive);
            let passes_clearly = j.worst <= 0.05 - slack && j.median <= 0.01 - slack;
            let fails_clearly = j.worst > 0.05 + slack || j.median > 0.01 + slack;
            let contradicted = match j.verdict {
                Verdict::Pass => fails_clearly,
                Verdict::Fail => passes_clearly,
                Verdict::Inconclusive => false,
            };
            if contradicted {
                wrong.push(format!(
                    "seed {seed}: {:?} but true worst {:.2}%, median {:.2}%\n{}",
                    j.verdict,
                    j.worst * 100.0,
                    j.median * 100.0,
                    j.text
                ));
            }
        }
    }
    println!("noise {:.0}%: {counts:?}", noise * 100.0);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    counts
}

/// How the keys of a run came out.
#[derive(Debug, Default)]
struct Counts {
    keys: usize,
    /// Truly over a limit…
    failing: usize,
    /// …and called FAIL.
    caught: usize,
    /// Truly within the limits and called PASS.
    passed: usize,
    inconclusive: usize,
}

#[test]
fn on_a_quiet_machine_verify_tells_good_tables_from_bad() {
    let c = check(0.02, 1..9);
    // The moved edges make some keys fail and leave others within the limits.
    assert!(c.failing >= 5 && c.keys - c.failing >= 5, "{c:?}");
    // At 2 % noise nearly everything is decided either way.
    assert!(c.inconclusive * 5 <= c.keys, "{c:?}");
    assert!(c.caught * 4 >= c.failing * 3, "{c:?}");
}

#[test]
fn at_twenty_percent_noise_verify_says_what_it_cannot_tell() {
    let c = check(0.20, 11..19);
    assert!(c.failing >= 5 && c.keys - c.failing >= 5, "{c:?}");
    assert!(
        c.inconclusive > 0,
        "20 % noise leaves some keys undecided: {c:?}"
    );
}
