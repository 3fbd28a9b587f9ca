//! Forcing an algorithm at run time, for users whose hardware the tables get wrong
//! and for benchmarking one kernel against another. See [`Policy`].

use core::fmt;

use crate::{Algo, Collective, Query, Tables};

/// The environment variable read by [`Policy::from_env`].
pub const OVERRIDE_ENV: &str = "COLLTUNE_ALGO";

/// The tables, plus an optional forced algorithm per collective.
///
/// The environment variable [`OVERRIDE_ENV`] (`COLLTUNE_ALGO`) holds a
/// comma-separated list of entries:
///
/// - `ALGO` forces `ALGO` for every collective it implements
///   (`COLLTUNE_ALGO=one_shot_pull` forces all-reduce and all-gather;
///   `two_shot_pull` forces all-reduce only, as it has no all-gather;
///   `one_shot_push` forces the fused all-reduce + add + RMSNorm too);
/// - `COLLECTIVE=ALGO` forces one collective
///   (`COLLTUNE_ALGO=all_reduce=two_shot_pull,all_gather=nccl`);
///   it wins over a bare `ALGO` in the same list.
///
/// Unset or empty (or only spaces) means no override. Anything else that does not
/// parse (an unknown algorithm or collective, an algorithm that does not implement
/// the named collective, a collective named twice, two bare algorithms) is an
/// [`OverrideError`] whose message lists the valid names; it is never ignored.
///
/// A forced custom algorithm still declines sizes it cannot take (over capacity,
/// misaligned): `kernels` then runs the collective's fallback, as for any
/// decline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// The algorithm forced per collective, indexed by its discriminant.
    forced: [Option<Algo>; Collective::ALL.len()],
}

impl Policy {
    /// The tables alone, no override.
    pub const fn none() -> Policy {
        Policy {
            forced: [None; Collective::ALL.len()],
        }
    }

    /// Reads [`OVERRIDE_ENV`]; see the module docs for the syntax.
    pub fn from_env() -> Result<Policy, OverrideError> {
        Self::from_env_value(std::env::var(OVERRIDE_ENV))
    }

    fn from_env_value(value: Result<String, std::env::VarError>) -> Result<Policy, OverrideError> {
        match value {
            Ok(spec) => Self::from_spec(&spec),
            Err(std::env::VarError::NotPresent) => Ok(Policy::none()),
            Err(std::env::VarError::NotUnicode(raw)) => Err(OverrideError {
                spec: raw.to_string_lossy().into_owned(),
                problem: "the value is not valid UTF-8".to_string(),
            }),
        }
    }

    /// Parses an override such as `one_shot_pull` or
    /// `all_reduce=two_shot_pull,all_gather=nccl`; see the module docs.
    pub fn from_spec(spec: &str) -> Result<Policy, OverrideError> {
        let fail = |problem: String| OverrideError {
            spec: spec.to_string(),
            problem,
        };
        if spec.trim().is_empty() {
            return Ok(Policy::none());
        }
        let mut bare: Option<Algo> = None;
        let mut explicit = Policy::none();
        for entry in spec.split(',').map(str::trim) {
            match entry.split_once('=') {
                None => {
                    let algo = parse_algo(entry).map_err(fail)?;
                    if let Some(first) = bare {
                        return Err(fail(format!(
                            "two algorithms for every collective (`{}` and `{}`); name the collective, e.g. all_reduce={}",
                            first.name(),
                            algo.name(),
                            algo.name()
                        )));
                    }
                    bare = Some(algo);
                }
                Some((collective, algo)) => {
                    let collective = parse_collective(collective.trim()).map_err(fail)?;
                    let algo = parse_algo(algo.trim()).map_err(fail)?;
                    if !algo.implements(collective) {
                        return Err(fail(does_not_implement(algo, collective)));
                    }
                    if explicit.forced(collective).is_some() {
                        return Err(fail(format!("{} is named twice", collective.name())));
                    }
                    explicit.set(collective, algo);
                }
            }
        }
        // `forced` is indexed by discriminant, the order of `Collective::ALL`.
        let forced = Collective::ALL.map(|collective| {
            let from_bare = bare.filter(|algo| algo.implements(collective));
            explicit.forced(collective).or(from_bare)
        });
        Ok(Policy { forced })
    }

    fn set(&mut self, collective: Collective, algo: Algo) {
        self.forced[collective as usize] = Some(algo);
    }

    /// The algorithm forced for `collective`, if any.
    #[inline]
    pub const fn forced(&self, collective: Collective) -> Option<Algo> {
        self.forced[collective as usize]
    }

    /// True when nothing is forced.
    pub const fn is_none(&self) -> bool {
        let mut i = 0;
        while i < self.forced.len() {
            if self.forced[i].is_some() {
                return false;
            }
            i += 1;
        }
        true
    }

    /// The forced algorithm for `q.key.collective`, else [`crate::select`] (the
    /// tables built into `policy`).
    #[inline]
    pub const fn select(&self, q: Query) -> Algo {
        match self.forced(q.key.collective) {
            Some(algo) => algo,
            None => crate::select(q),
        }
    }

    /// The forced algorithm for `q.key.collective`, else what `tables` choose: for
    /// a dispatcher whose tables are an engine's ([`crate::tables_in_use`]).
    #[inline]
    pub fn select_with(&self, tables: &Tables, q: Query) -> Algo {
        match self.forced(q.key.collective) {
            Some(algo) => algo,
            None => tables.select(q),
        }
    }
}

/// The override in the syntax [`Policy::from_spec`] reads (`none` when empty),
/// for logs: `all_reduce=two_shot_pull,all_gather=nccl`.
impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_none() {
            return f.write_str("none");
        }
        let entries: Vec<String> = Collective::ALL
            .into_iter()
            .filter_map(|c| self.forced(c).map(|a| format!("{}={}", c.name(), a.name())))
            .collect();
        f.write_str(&entries.join(","))
    }
}

fn parse_algo(name: &str) -> Result<Algo, String> {
    Algo::from_name(name).ok_or_else(|| {
        if name.is_empty() {
            "an entry is empty (two commas, or a comma at the end?)".to_string()
        } else {
            format!("unknown algorithm `{name}`")
        }
    })
}

fn parse_collective(name: &str) -> Result<Collective, String> {
    Collective::from_name(name).ok_or_else(|| format!("unknown collective `{name}`"))
}

fn does_not_implement(algo: Algo, collective: Collective) -> String {
    let valid: Vec<&str> = collective.algos().iter().map(|a| a.name()).collect();
    format!(
        "{} does not implement {} (its algorithms: {})",
        algo.name(),
        collective.name(),
        valid.join(", ")
    )
}

/// Why an override could not be read. Its message names the value, the problem
/// and the valid names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverrideError {
    spec: String,
    problem: String,
}

impl OverrideError {
    /// The problem alone, e.g. "unknown algorithm `ring`".
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

impl fmt::Display for OverrideError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let algos: Vec<&str> = Algo::ALL.iter().map(|a| a.name()).collect();
        let collectives: Vec<&str> = Collective::ALL.iter().map(|c| c.name()).collect();
        write!(
            f,
            "invalid {OVERRIDE_ENV} value {:?}: {}. Valid algorithms: {}; valid collectives: {}; \
             write ALGO or COLLECTIVE=ALGO[,COLLECTIVE=ALGO], e.g. {OVERRIDE_ENV}=one_shot_pull \
             or {OVERRIDE_ENV}=all_reduce=two_shot_pull,all_gather=nccl",
            self.spec,
            self.problem,
            algos.join(", "),
            collectives.join(", ")
        )
    }
}

impl std::error::Error for OverrideError {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::env::VarError;

    #[test]
    fn unset_or_blank_means_no_override() {
        assert_eq!(
            Policy::from_env_value(Err(VarError::NotPresent)),
            Ok(Policy::none())
        );
        assert_eq!(
            Policy::from_env_value(Ok(String::new())),
            Ok(Policy::none())
        );
        assert_eq!(Policy::from_spec("  "), Ok(Policy::none()));
    }

    #[test]
    fn non_unicode_value_is_an_error() {
        let raw = std::ffi::OsString::from("x");
        let error = Policy::from_env_value(Err(VarError::NotUnicode(raw))).unwrap_err();
        assert_eq!(error.problem(), "the value is not valid UTF-8");
    }

    #[test]
    fn value_is_read_through_the_same_parser() {
        let policy = Policy::from_env_value(Ok("all_gather=one_shot_pull".into())).unwrap();
        assert_eq!(
            policy.forced(Collective::AllGather),
            Some(Algo::OneShotPull)
        );
        assert_eq!(policy.forced(Collective::AllReduce), None);
    }
}
