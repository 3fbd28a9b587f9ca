//! How sizes, times and bands read in the tuner's reports. Display only: the
//! TOML's canonical spelling of sizes is `tuned_schema`'s business.

use policy::Band;

const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];

/// `448KiB` when exact, `78.39KiB` (two decimals) when not, `80B` below 1 KiB.
pub fn size(bytes: u64) -> String {
    for (unit, scale) in UNITS {
        if bytes >= scale {
            return if bytes.is_multiple_of(scale) {
                format!("{}{unit}", bytes / scale)
            } else {
                format!("{:.2}{unit}", bytes as f64 / scale as f64)
            };
        }
    }
    format!("{bytes}B")
}

/// A band edge exactly: `448KiB` when a unit divides it, else the approximate
/// size with the exact bytes, `78.39KiB (80272B)`.
pub fn exact_size(bytes: u64) -> String {
    let canonical = tuned_schema::size::format_size(bytes);
    if bytes < 1024 || canonical.ends_with("iB") {
        canonical
    } else {
        format!("{} ({canonical})", size(bytes))
    }
}

/// A fraction as a percentage with two decimals: `1.50%`.
pub fn percent(x: f64) -> String {
    format!("{:.2}%", x * 100.0)
}

/// `12.34µs`, or `-` when absent.
pub fn micros(value: Option<f64>) -> String {
    match value {
        Some(v) => format!("{v:.2}µs"),
        None => "-".to_string(),
    }
}

/// `one_shot_push ≤ 32KiB | one_shot_pull ≤ 256KiB | nccl`, each edge as
/// `size` writes it ([`size`], or [`exact_size`] where edges must be exact).
pub fn bands(bands: &[Band], size: fn(u64) -> String) -> String {
    bands
        .iter()
        .map(|b| match b.max {
            Some(max) => format!("{} ≤ {}", b.algo.name(), size(max)),
            None => b.algo.name().to_string(),
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// `2, 4, 8`: each item as it displays, comma-separated.
pub fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    let items: Vec<String> = items.into_iter().map(|x| x.to_string()).collect();
    items.join(", ")
}

/// `tuned_schema`'s diagnostics, each on an indented line of its own: what
/// follows the `…:` of a message about them.
pub fn diagnostics(list: &[tuned_schema::Diagnostic]) -> String {
    list.iter().map(|d| format!("\n  {d}")).collect()
}

/// A report as `--json` prints it: pretty JSON and a newline.
pub fn json(report: &impl serde::Serialize) -> String {
    let mut text = serde_json::to_string_pretty(report).expect("reports are plain data");
    text.push('\n');
    text
}

/// What a run is estimated to take: `estimated 2m 05s`, or for the synthetic
/// model (`modelled`) the GPU time it models but does not spend.
pub fn estimate(seconds: f64, modelled: bool) -> String {
    let estimate = duration(seconds);
    if modelled {
        format!("{estimate} of modelled GPU time, which the synthetic model does not spend")
    } else {
        format!("estimated {estimate}")
    }
}

/// Seconds as `2m 05s` or `41s`.
pub fn duration(seconds: f64) -> String {
    let whole = seconds.max(0.0).round() as u64;
    if whole >= 60 {
        format!("{}m {:02}s", whole / 60, whole % 60)
    } else {
        format!("{whole}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::Algo;

    #[test]
    fn sizes_read_naturally() {
        assert_eq!(size(16), "16B");
        assert_eq!(size(448 * 1024), "448KiB");
        assert_eq!(size(80_272), "78.39KiB");
        assert_eq!(size(256 << 20), "256MiB");
        assert_eq!(exact_size(448 * 1024), "448KiB");
        assert_eq!(exact_size(80_272), "78.39KiB (80272B)");
        assert_eq!(exact_size(80), "80B");
    }

    #[test]
    fn bands_read_as_a_line() {
        let b = [
            Band {
                max: Some(32 * 1024),
                algo: Algo::OneShotPush,
            },
            Band {
                max: None,
                algo: Algo::Nccl,
            },
        ];
        assert_eq!(bands(&b, size), "one_shot_push ≤ 32KiB | nccl");
        assert_eq!(duration(125.0), "2m 05s");
        assert_eq!(duration(41.4), "41s");
    }
}
