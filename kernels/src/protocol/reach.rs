//! Whether the custom kernels can run in a world of processes, decided from
//! what each rank's driver says about each peer.
//!
//! Every rank classifies every peer ([`Reach`]), the rows are exchanged, and all
//! ranks then apply [`decide`] to the same matrix, so they reach the same
//! decision without further talk.
//!
//! Which link a world forms is decided here once, by [`world_link`], for every
//! kind of world: a world of processes ([`decide`]), the GPUs of a
//! single-process world (`peer::connect`) and the GPUs the tuner measures. The custom kernels need every ordered pair to
//! be mappable; one pair that is not (another host, no P2P, a GPU this process
//! cannot see) sends every call to NCCL.

use super::MAX_WORLD;
use crate::vocab::Link;

/// How rank i reaches rank j, as rank i's driver sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The diagonal.
    Itself,
    /// Both ranks run on the same GPU (CUDA IPC within one device).
    SameGpu,
    /// P2P with native atomics: NVLink (see [`crate::raw::PairLink`]).
    NvLink,
    /// P2P without native atomics: PCIe.
    Pcie,
    /// The driver reports no P2P access between the two GPUs.
    NoPeerAccess,
    /// The peer's GPU is not visible to this process (e.g. `CUDA_VISIBLE_DEVICES`).
    NotVisible,
    /// The peer runs on another host.
    OtherHost,
}

impl Reach {
    const CODES: [(Reach, char); 7] = [
        (Reach::Itself, 'i'),
        (Reach::SameGpu, 'g'),
        (Reach::NvLink, 'n'),
        (Reach::Pcie, 'p'),
        (Reach::NoPeerAccess, 'x'),
        (Reach::NotVisible, 'v'),
        (Reach::OtherHost, 'h'),
    ];

    /// The one-letter code a rank sends for this reach in the `reach` round.
    pub fn code(self) -> char {
        Self::CODES.iter().find(|(r, _)| *r == self).unwrap().1
    }

    /// The reach a code stands for ([`Reach::code`]); `None` for any other
    /// character.
    pub fn from_code(code: char) -> Option<Reach> {
        Self::CODES
            .iter()
            .find(|(_, c)| *c == code)
            .map(|(r, _)| *r)
    }

    /// Whether custom kernels can address the peer's buffers.
    pub fn mappable(self) -> bool {
        matches!(
            self,
            Reach::Itself | Reach::SameGpu | Reach::NvLink | Reach::Pcie
        )
    }

    /// The reach as a phrase for messages ("PCIe peer access").
    pub fn describe(self) -> &'static str {
        match self {
            Reach::Itself => "itself",
            Reach::SameGpu => "the same GPU",
            Reach::NvLink => "NVLink peer access",
            Reach::Pcie => "PCIe peer access",
            Reach::NoPeerAccess => "no peer access between the GPUs",
            Reach::NotVisible => "a GPU this process cannot see",
            Reach::OtherHost => "another host",
        }
    }
}

/// A row as it travels: one code per rank.
pub fn encode_row(row: &[Reach]) -> String {
    row.iter().map(|r| r.code()).collect()
}

pub fn decode_row(text: &str, world: usize) -> Result<Vec<Reach>, String> {
    let row: Option<Vec<Reach>> = text.chars().map(Reach::from_code).collect();
    match row {
        Some(row) if row.len() == world => Ok(row),
        _ => Err(format!(
            "a reachability row must be {world} codes, not {text:?}"
        )),
    }
}

/// What a world of processes can run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// `Err(why)` when some pair cannot map the other's memory.
    pub custom: Result<(), String>,
    /// The link the policy is asked about.
    pub link: Link,
    /// Most ranks sharing one GPU (1 when each has its own): the launch shape
    /// must let that many ranks' blocks be resident at once.
    pub ranks_per_gpu: usize,
}

/// The link a world of `world` ranks forms, the one rule: `pairs` is how each
/// rank reaches each other rank (every ordered pair of distinct ranks), and
/// `ranks_per_gpu` the most ranks sharing one GPU (1 when each has its own).
///
/// - a world of one rank is `Loopback` (one GPU has no link);
/// - a world with a pair that cannot map the other's memory is `Pcie` (its
///   custom kernels decline; NCCL runs everything);
/// - a world where some GPU hosts several ranks is `Loopback`: it validates
///   correctness, never NVLink timing, exactly as a loopback world;
/// - `NvLink` when every pair of distinct GPUs is NVLink, else `Pcie`.
pub fn world_link(
    world: usize,
    ranks_per_gpu: usize,
    pairs: impl IntoIterator<Item = Reach>,
) -> Link {
    let mut mappable = true;
    let mut all_nvlink = true;
    for r in pairs {
        mappable &= r.mappable();
        all_nvlink &= matches!(r, Reach::NvLink | Reach::SameGpu);
    }
    if world == 1 || (ranks_per_gpu > 1 && mappable) {
        Link::Loopback
    } else if mappable && all_nvlink {
        Link::NvLink
    } else {
        Link::Pcie
    }
}

/// Applies the rules to the matrix `reach[i][j]` (rank i's view of rank j) and
/// the GPU each rank runs on (`gpu[i]`, any identifier such as the UUID).
///
/// - custom kernels run only if every ordered pair is mappable;
/// - the link is [`world_link`]'s.
pub fn decide(reach: &[Vec<Reach>], gpu: &[String]) -> Decision {
    let world = reach.len();
    let mut ranks_per_gpu = 1;
    for id in gpu {
        ranks_per_gpu = ranks_per_gpu.max(gpu.iter().filter(|g| *g == id).count());
    }
    let pairs = || {
        reach.iter().enumerate().flat_map(|(i, row)| {
            row.iter()
                .enumerate()
                .filter(move |&(j, _)| j != i)
                .map(move |(j, &r)| (i, j, r))
        })
    };
    let custom = if world > MAX_WORLD {
        Err(format!(
            "a world of {world} ranks: the custom kernels serve up to {MAX_WORLD}"
        ))
    } else {
        match pairs().find(|&(_, _, r)| !r.mappable()) {
            None => Ok(()),
            Some((i, j, r)) => Err(format!(
                "rank {i} reaches rank {j} through {}",
                r.describe()
            )),
        }
    };
    let link = world_link(world, ranks_per_gpu, pairs().map(|(_, _, r)| r));
    Decision {
        custom,
        link,
        ranks_per_gpu,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Reach::*;

    fn gpus(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rows_round_trip() {
        let row = vec![
            Itself,
            SameGpu,
            NvLink,
            Pcie,
            NoPeerAccess,
            NotVisible,
            OtherHost,
        ];
        let text = encode_row(&row);
        assert_eq!(text, "ignpxvh");
        assert_eq!(decode_row(&text, 7).unwrap(), row);
        assert!(decode_row(&text, 6).is_err());
        assert!(decode_row("iz", 2).is_err());
    }

    #[test]
    fn processes_sharing_one_gpu_form_a_loopback_world() {
        let d = decide(
            &[vec![Itself, SameGpu], vec![SameGpu, Itself]],
            &gpus(&["a", "a"]),
        );
        assert_eq!(d.custom, Ok(()));
        assert_eq!(d.link, Link::Loopback);
        assert_eq!(d.ranks_per_gpu, 2);
    }

    #[test]
    fn nvlink_only_when_every_pair_is() {
        let all = vec![
            vec![Itself, NvLink, NvLink],
            vec![NvLink, Itself, NvLink],
            vec![NvLink, NvLink, Itself],
        ];
        assert_eq!(decide(&all, &gpus(&["a", "b", "c"])).link, Link::NvLink);
        let mut mixed = all.clone();
        mixed[2][0] = Pcie;
        let d = decide(&mixed, &gpus(&["a", "b", "c"]));
        assert_eq!((d.custom.clone(), d.link), (Ok(()), Link::Pcie));
    }

    #[test]
    fn one_unmappable_pair_sends_everything_to_nccl() {
        let reach = vec![vec![Itself, OtherHost], vec![OtherHost, Itself]];
        let d = decide(&reach, &gpus(&["a", "b"]));
        assert_eq!(
            d.custom,
            Err("rank 0 reaches rank 1 through another host".into())
        );
        assert_eq!(d.link, Link::Pcie);
        // One direction is enough to decline.
        let reach = vec![vec![Itself, NvLink], vec![NotVisible, Itself]];
        assert!(decide(&reach, &gpus(&["a", "b"])).custom.is_err());
    }

    #[test]
    fn the_link_rule() {
        assert_eq!(world_link(1, 1, []), Link::Loopback);
        assert_eq!(world_link(2, 1, [NvLink, NvLink]), Link::NvLink);
        assert_eq!(world_link(2, 1, [NvLink, Pcie]), Link::Pcie);
        assert_eq!(world_link(2, 1, [NvLink, NoPeerAccess]), Link::Pcie);
        assert_eq!(world_link(2, 2, [SameGpu, SameGpu]), Link::Loopback);
        // Sharing a GPU does not make an unmappable world loopback.
        assert_eq!(world_link(3, 2, [SameGpu, OtherHost]), Link::Pcie);
    }

    #[test]
    fn a_world_of_one_is_loopback() {
        let d = decide(&[vec![Itself]], &gpus(&["a"]));
        assert_eq!(
            (d.custom, d.link, d.ranks_per_gpu),
            (Ok(()), Link::Loopback, 1)
        );
    }
}
