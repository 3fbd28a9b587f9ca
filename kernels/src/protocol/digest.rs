//! What the processes of a world tell each other while they form it: ordered
//! `field=value` lines ([`Digest`]), and the check that every rank agrees on the
//! fields that must be equal ([`check_agreement`]), reported with the field and
//! both values.
//!
//! Text rather than a binary struct: the blobs are tiny, exchanged once, and a
//! mismatch is reported to a person, so readable values win.

/// Bumped whenever the rounds, their fields or the way kernels use another
/// process's memory change; ranks of different versions refuse each other.
pub const PROTOCOL_VERSION: u32 = 3;

/// One rank's contribution to a round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Digest {
    fields: Vec<(String, String)>,
}

impl Digest {
    pub fn new() -> Digest {
        Digest::default()
    }

    /// Appends `field=value`. Newlines in the value are replaced by spaces (one
    /// field per line); a field named twice keeps the first value on lookup.
    pub fn with(mut self, field: &str, value: impl std::fmt::Display) -> Digest {
        let value = value.to_string().replace(['\n', '\r'], " ");
        self.fields.push((field.to_string(), value));
        self
    }

    pub fn get(&self, field: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(f, _)| f == field)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `field`, or a message naming what is missing.
    pub fn require(&self, field: &str) -> Result<&str, String> {
        self.get(field)
            .ok_or_else(|| format!("the digest has no field `{field}`"))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = String::new();
        for (field, value) in &self.fields {
            out.push_str(field);
            out.push('=');
            out.push_str(value);
            out.push('\n');
        }
        out.into_bytes()
    }

    pub fn decode(bytes: &[u8]) -> Result<Digest, String> {
        let text = std::str::from_utf8(bytes).map_err(|_| "a digest is not UTF-8".to_string())?;
        let mut digest = Digest::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let (field, value) = line
                .split_once('=')
                .ok_or_else(|| format!("a digest line without `=`: {line:?}"))?;
            digest.fields.push((field.to_string(), value.to_string()));
        }
        Ok(digest)
    }
}

/// Checks that every rank's digest has the same value as `digests[me]` for each
/// of `fields`. The first difference (lowest rank, then field order) is the
/// error: "rank 1 and rank 0 disagree on world_size: rank 1 has 3, rank 0 has 2".
pub fn check_agreement(me: usize, digests: &[Digest], fields: &[&str]) -> Result<(), String> {
    let mine = &digests[me];
    for (rank, theirs) in digests.iter().enumerate() {
        if rank == me {
            continue;
        }
        for field in fields {
            let (a, b) = (theirs.get(field), mine.get(field));
            if a != b {
                let show = |v: Option<&str>| v.map_or("nothing".to_string(), |v| v.to_string());
                return Err(format!(
                    "rank {rank} and rank {me} disagree on {field}: rank {rank} has {}, rank {me} \
                     has {}",
                    show(a),
                    show(b)
                ));
            }
        }
    }
    Ok(())
}

/// FNV-1a, 64 bits: a fingerprint of text that is the same in every process and
/// every build (unlike `std`'s randomly seeded hashers).
pub const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(world: usize, arch: &str) -> Digest {
        Digest::new()
            .with("protocol", PROTOCOL_VERSION)
            .with("world_size", world)
            .with("arch", arch)
    }

    #[test]
    fn digests_round_trip() {
        let d = hello(2, "sm90").with("note", "two\nlines");
        let back = Digest::decode(&d.encode()).unwrap();
        assert_eq!(back.get("world_size"), Some("2"));
        assert_eq!(back.get("note"), Some("two lines"));
        assert_eq!(back, d);
        assert_eq!(
            Digest::decode(b"a=1\nno equals sign\n"),
            Err("a digest line without `=`: \"no equals sign\"".to_string())
        );
        assert_eq!(
            Digest::decode(&[0xff]),
            Err("a digest is not UTF-8".to_string())
        );
    }

    #[test]
    fn agreement_names_the_field_and_both_values() {
        let digests = vec![hello(2, "sm90"), hello(3, "sm90"), hello(2, "sm90")];
        let err = check_agreement(0, &digests, &["protocol", "world_size", "arch"]).unwrap_err();
        assert_eq!(
            err,
            "rank 1 and rank 0 disagree on world_size: rank 1 has 3, rank 0 has 2"
        );
        // Seen from rank 1, rank 0 is the first that differs.
        let err = check_agreement(1, &digests, &["world_size"]).unwrap_err();
        assert!(err.starts_with("rank 0 and rank 1"), "{err}");
        assert!(check_agreement(0, &digests, &["arch"]).is_ok());
    }

    #[test]
    fn a_missing_field_is_a_difference() {
        let digests = vec![
            hello(2, "sm90"),
            Digest::new().with("protocol", PROTOCOL_VERSION),
        ];
        let err = check_agreement(0, &digests, &["protocol", "arch"]).unwrap_err();
        assert!(err.contains("rank 1 has nothing, rank 0 has sm90"), "{err}");
    }

    #[test]
    fn fnv_is_the_published_function() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
