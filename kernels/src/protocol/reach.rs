//! Whether the custom kernels can run in a world of processes, decided from
//! what each rank's driver says about each peer.
//!
//! Every rank classifies every peer ([`Reach`]), the rows are exchanged, and all
//! ranks then apply [`decide`] to the same matrix, so they reach the same
//! decision without further talk. The custom kernels need every ordered pair to
//! be mappable; one pair that is not (another host, no P2P, a GPU this process
//! cannot see) sends every call to NCCL.

use crate::vocab::Link;

/// How rank i reaches rank j, as rank i's driver sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// The diagonal.
    Itself,
    /// Both ranks run on the same GPU (CUDA IPC within one device).
    SameGpu,
    /// P2P with native atomics: NVLink (see [`crate::peer`]).
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

    pub fn code(self) -> char {
        Self::CODES.iter().find(|(r, _)| *r == self).unwrap().1
    }

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

/// Applies the rules to the matrix `reach[i][j]` (rank i's view of rank j) and
/// the GPU each rank runs on (`gpu[i]`, any identifier such as the UUID).
///
/// - custom kernels run only if every ordered pair is mappable;
/// - the link is `Loopback` when some GPU hosts several ranks (that world
///   validates correctness, never NVLink timing, exactly as a loopback world),
///   `NvLink` when every pair of distinct GPUs is NVLink, else `Pcie`;
/// - a world of one rank is `Loopback`, like a devices world of one GPU.
pub fn decide(reach: &[Vec<Reach>], gpu: &[String]) -> Decision {
    let world = reach.len();
    let mut ranks_per_gpu = 1;
    for id in gpu {
        ranks_per_gpu = ranks_per_gpu.max(gpu.iter().filter(|g| *g == id).count());
    }
    let mut custom = Ok(());
    let mut all_nvlink = true;
    'rows: for (i, row) in reach.iter().enumerate() {
        for (j, r) in row.iter().enumerate() {
            if i == j {
                continue;
            }
            if !r.mappable() {
                custom = Err(format!(
                    "rank {i} reaches rank {j} through {}",
                    r.describe()
                ));
                break 'rows;
            }
            all_nvlink &= matches!(r, Reach::NvLink | Reach::SameGpu);
        }
    }
    let link = if world == 1 || (ranks_per_gpu > 1 && custom.is_ok()) {
        Link::Loopback
    } else if custom.is_ok() && all_nvlink {
        Link::NvLink
    } else {
        Link::Pcie
    };
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
    fn a_world_of_one_is_loopback() {
        let d = decide(&[vec![Itself]], &gpus(&["a"]));
        assert_eq!(
            (d.custom, d.link, d.ranks_per_gpu),
            (Ok(()), Link::Loopback, 1)
        );
    }
}
