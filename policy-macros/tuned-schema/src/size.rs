//! Byte sizes as people write them in `tuned/*.toml`: `"448KiB"`, `"2MiB"`,
//! `"1.125MiB"`, `"512B"`, `"4096"`, or a plain TOML integer.
//!
//! Only binary units exist here (`KiB` = 1024). `KB`/`MB` are refused rather than
//! guessed, because vendors use them for both 1000 and 1024.

const UNITS: [(&str, u64); 4] = [
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("B", 1),
];

/// Parses a size string into bytes. A fractional number is accepted only when it
/// names a whole number of bytes (`"1.125MiB"` is 1179648; `"1.3KiB"` is an error).
pub fn parse_size(text: &str) -> Result<u64, String> {
    if text.trim_start().starts_with('-') {
        return Err(format!(
            "invalid size `{text}`: a size is a number of bytes and cannot be negative"
        ));
    }
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(number_end);
    let unit = unit.trim_start_matches(' ');
    let multiplier = unit_multiplier(unit).ok_or_else(|| unknown_unit(text, unit))?;
    scale(number, multiplier).map_err(|e| match e {
        Scale::Malformed => format!(
            "invalid size `{text}`: expected a number of bytes or a number with KiB, MiB or GiB, e.g. \"448KiB\""
        ),
        Scale::NotWhole => format!("size `{text}` is not a whole number of bytes"),
        Scale::TooLarge => format!(
            "size `{text}` is too large: sizes go up to {} bytes (16 EiB − 1)",
            u64::MAX
        ),
    })
}

/// The canonical spelling of a size: the largest unit that divides it exactly,
/// e.g. `448KiB`, `2MiB`, `1152KiB`, `262128B`.
pub fn format_size(bytes: u64) -> String {
    for (suffix, multiplier) in UNITS {
        if bytes != 0 && bytes.is_multiple_of(multiplier) {
            return format!("{}{suffix}", bytes / multiplier);
        }
    }
    "0B".to_string()
}

fn unit_multiplier(unit: &str) -> Option<u64> {
    if unit.is_empty() {
        return Some(1);
    }
    UNITS.iter().find(|(s, _)| *s == unit).map(|&(_, m)| m)
}

fn unknown_unit(text: &str, unit: &str) -> String {
    let hint = match unit {
        "KB" | "kB" | "K" | "k" => " (write KiB: sizes are binary, 1 KiB = 1024 bytes)",
        "MB" | "M" => " (write MiB: sizes are binary, 1 MiB = 1048576 bytes)",
        "GB" | "G" => " (write GiB: sizes are binary)",
        _ => "",
    };
    format!("invalid size `{text}`: unknown unit `{unit}`; expected B, KiB, MiB or GiB{hint}")
}

/// Why a number and unit are not a size.
enum Scale {
    Malformed,
    NotWhole,
    TooLarge,
}

/// `number × multiplier` for a decimal `number` such as `1.125`.
fn scale(number: &str, multiplier: u64) -> Result<u64, Scale> {
    let (whole, fraction) = match number.split_once('.') {
        Some((w, f)) => (w, f),
        None => (number, ""),
    };
    let well_formed = !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && fraction.bytes().all(|b| b.is_ascii_digit())
        && !(number.contains('.') && fraction.is_empty())
        && fraction.len() <= 18;
    if !well_formed {
        return Err(Scale::Malformed);
    }
    // Work in u128 on the digits without the point: 1.125 → 1125 / 10^3. Any
    // number too long for u128 is far beyond u64 too.
    let digits: u128 = format!("{whole}{fraction}")
        .parse()
        .map_err(|_| Scale::TooLarge)?;
    let denominator = 10u128.pow(fraction.len() as u32);
    let numerator = digits
        .checked_mul(u128::from(multiplier))
        .ok_or(Scale::TooLarge)?;
    if numerator % denominator != 0 {
        return Err(Scale::NotWhole);
    }
    u64::try_from(numerator / denominator).map_err(|_| Scale::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("448KiB"), Ok(448 * 1024));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("1.125MiB"), Ok(1_179_648));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("16 KiB"), Ok(16 * 1024));
    }

    #[test]
    fn refuses_bad_sizes() {
        assert!(
            parse_size("1.3KiB")
                .unwrap_err()
                .contains("not a whole number")
        );
        assert!(parse_size("4KB").unwrap_err().contains("write KiB"));
        assert!(
            parse_size("4TiB")
                .unwrap_err()
                .contains("unknown unit `TiB`")
        );
        assert!(parse_size("").is_err());
        assert!(parse_size("KiB").is_err());
        assert!(parse_size("1.KiB").is_err());
        assert!(parse_size(".5KiB").is_err());
        assert!(parse_size("-1").unwrap_err().contains("cannot be negative"));
        assert!(
            parse_size("-5KiB")
                .unwrap_err()
                .contains("cannot be negative")
        );
        for huge in [
            "99999999999GiB",
            "99999999999999999999GiB",
            "18446744073709551616",
            "999999999999999999999999999999999999999999",
        ] {
            let e = parse_size(huge).unwrap_err();
            assert!(e.contains("is too large"), "{huge}: {e}");
        }
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
        assert!(parse_size("1.2.3KiB").is_err());
    }

    #[test]
    fn formats_with_largest_exact_unit() {
        assert_eq!(format_size(448 * 1024), "448KiB");
        assert_eq!(format_size(8 << 20), "8MiB");
        assert_eq!(format_size(1_179_648), "1152KiB");
        assert_eq!(format_size(262_128), "262128B");
        assert_eq!(format_size(3 << 30), "3GiB");
        assert_eq!(format_size(0), "0B");
    }

    proptest! {
        #[test]
        fn format_then_parse_is_identity(bytes in any::<u64>()) {
            prop_assert_eq!(parse_size(&format_size(bytes)), Ok(bytes));
        }

        #[test]
        fn kib_fractions_in_eighths_are_whole(whole in 0u64..1_000_000, eighths in 0u64..8) {
            // n + k/8 KiB is always a whole number of bytes (128 × k).
            let text = format!("{whole}.{}KiB", eighths * 125);
            prop_assert_eq!(parse_size(&text), Ok(whole * 1024 + eighths * 128));
        }
    }
}
