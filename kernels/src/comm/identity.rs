//! What a process tells its peers when a world of processes forms: who it is
//! (host, process, GPU) and the configuration every rank must share, and how it
//! reaches each peer's GPU.

use std::sync::Arc;

use cudarc::driver::CudaContext;

use super::options::Options;
use crate::error::{DriverContext, Error, Result};
use crate::ffi;
use crate::module;
use crate::peer;
use crate::protocol::digest::{Digest, PROTOCOL_VERSION, check_agreement, fnv1a};
use crate::protocol::reach::Reach;
use crate::selection::Selector;
use crate::vocab::{Arch, DType};

/// Fields of the `hello` round every rank must have equal. Ranks of another
/// protocol or kernel source would misread each other's memory; another world
/// size, architecture, policy (tables or `COLLTUNE_ALGO`) or launch request
/// would select different algorithms or grids and leave peers waiting; another
/// dtype means the engine loaded the model differently; another sequence start
/// would make barrier values disagree; another programmatic-launch setting
/// another launch shape.
pub(crate) const SHARED_HELLO: [&str; 11] = [
    "protocol",
    "kernels",
    "world_size",
    "arch",
    "policy_tables",
    "policy_override",
    "dtype",
    "threads",
    "blocks",
    "programmatic_launch",
    "sequence_start",
];

/// This process and its GPU.
pub(crate) struct Identity {
    host: String,
    /// The kernel's boot id: equal exactly when two processes share a machine
    /// (host names can repeat across containers and clusters).
    boot_id: String,
    pid: u32,
    uuid: String,
    bus_id: String,
    sms: u32,
}

impl Identity {
    pub(crate) fn of(ctx: &Arc<CudaContext>) -> Result<Identity> {
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        let host = read("/proc/sys/kernel/hostname")
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown-host".into());
        let boot_id = read("/proc/sys/kernel/random/boot_id").unwrap_or_else(|| host.clone());
        let uuid = ctx.uuid().during("querying the GPU's UUID")?;
        let uuid: Vec<u8> = uuid.bytes.iter().map(|&b| b as u8).collect();
        Ok(Identity {
            host,
            boot_id,
            pid: std::process::id(),
            uuid: crate::ipc::hex_encode(&uuid),
            bus_id: ffi::pci_bus_id(ctx.cu_device())?,
            sms: super::setup::sm_count(ctx)?,
        })
    }
}

/// The hash of the kernel sources (with any experiment switches) that every
/// rank of a world must share.
pub(crate) fn kernels_hash() -> Result<String> {
    Ok(format!(
        "{:016x}",
        fnv1a(module::kernel_source(0)?.as_bytes())
    ))
}

/// The `hello` blob of rank `rank`; `kernels` is [`kernels_hash`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn hello(
    rank: usize,
    world: usize,
    arch: Arch,
    selector: &Selector,
    dtype: Option<DType>,
    options: &Options,
    me: &Identity,
    kernels: &str,
) -> Digest {
    let requested = |v: Option<u32>| v.map_or("default".to_string(), |v| v.to_string());
    Digest::new()
        .with("protocol", PROTOCOL_VERSION)
        .with("kernels", kernels)
        .with("world_size", world)
        .with("arch", arch)
        .with("policy_tables", format!("{:016x}", policy_fingerprint()))
        .with("policy_override", selector.describe())
        .with("dtype", dtype.map_or("unchecked", |d| d.name()))
        .with("threads", requested(options.threads))
        .with("blocks", requested(options.blocks))
        .with("programmatic_launch", options.programmatic_launch)
        .with("sequence_start", options.sequence_start)
        .with("rank", rank)
        .with("host", &me.host)
        .with("boot_id", &me.boot_id)
        .with("pid", me.pid)
        .with("uuid", &me.uuid)
        .with("bus_id", &me.bus_id)
        .with("sms", me.sms)
}

/// A hash of every table the process selects with (`policy::tables_in_use()`:
/// policy's own, or the engine's it handed over): ranks built from different
/// `tuned/` folders would pick different algorithms for one call.
pub(crate) fn policy_fingerprint() -> u64 {
    fnv1a(format!("{:?}", policy::tables_in_use().platforms()).as_bytes())
}

/// Checks the gathered `hello` blobs from rank `rank`'s side.
pub(crate) fn check_hellos(rank: usize, mine: &Digest, hellos: &[Digest]) -> Result<()> {
    for (slot, theirs) in hellos.iter().enumerate() {
        let said = theirs.require("rank").map_err(Error::Mismatch)?;
        if said != slot.to_string() {
            return Err(Error::Mismatch(format!(
                "the rendezvous gave rank {slot}'s place to a process that says it is rank {said}"
            )));
        }
    }
    if &hellos[rank] != mine {
        return Err(Error::Mismatch(format!(
            "another process (pid {}) joined as rank {rank} too",
            hellos[rank].get("pid").unwrap_or("?")
        )));
    }
    check_agreement(rank, hellos, &SHARED_HELLO).map_err(Error::Mismatch)?;
    for (other, theirs) in hellos.iter().enumerate() {
        if other != rank
            && theirs.get("boot_id") == mine.get("boot_id")
            && theirs.get("pid") == mine.get("pid")
        {
            return Err(Error::Unsupported(format!(
                "ranks {rank} and {other} are in one process: CUDA IPC joins separate \
                 processes (use World::loopback or World::devices within a process)"
            )));
        }
    }
    Ok(())
}

impl Identity {
    /// Says this process runs on host `name` (tests: `ProcessSpec::with_host_identity`).
    pub(crate) fn pretend_host(&mut self, name: &str) {
        self.host = name.to_string();
        self.boot_id = format!("pretended host {name}");
    }
}

/// How this rank reaches every rank, from its driver's answers.
pub(crate) fn reach_row(
    rank: usize,
    ctx: &Arc<CudaContext>,
    hellos: &[Digest],
) -> Result<Vec<Reach>> {
    row_of(rank, hellos, |bus_id| {
        match ffi::device_by_pci_bus_id(bus_id) {
            None => Ok(Reach::NotVisible),
            Some(device) => Ok(peer::pair_link(ctx.cu_device(), device)?.reach()),
        }
    })
}

/// How rank `rank` reaches every rank: hosts told apart by their boot ids
/// (what the `hello` round carries, never rank numbers), GPUs by their
/// UUIDs, and another GPU of this host as `other_gpu` (its PCI bus id) says.
fn row_of(
    rank: usize,
    hellos: &[Digest],
    other_gpu: impl Fn(&str) -> Result<Reach>,
) -> Result<Vec<Reach>> {
    let mine = &hellos[rank];
    hellos
        .iter()
        .enumerate()
        .map(|(other, theirs)| {
            if other == rank {
                Ok(Reach::Itself)
            } else if theirs.get("boot_id") != mine.get("boot_id") {
                Ok(Reach::OtherHost)
            } else if theirs.get("uuid") == mine.get("uuid") {
                Ok(Reach::SameGpu)
            } else {
                other_gpu(theirs.get("bus_id").unwrap_or(""))
            }
        })
        .collect()
}

/// The smallest SM count of any rank (launch shapes must suit every GPU).
pub(crate) fn min_sms(hellos: &[Digest]) -> Result<u32> {
    hellos
        .iter()
        .map(|h| {
            h.require("sms")
                .map_err(Error::Mismatch)?
                .parse::<u32>()
                .map_err(|e| Error::Mismatch(format!("an SM count: {e}")))
        })
        .try_fold(u32::MAX, |least, sms| Ok(least.min(sms?)))
}

/// Test fixtures other modules' tests share: worlds across hosts.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    /// The `hello` of rank `r` of `world` on host `host`, GPU `gpu`.
    pub(crate) fn hello_on(r: usize, world: usize, host: &str, gpu: usize) -> Digest {
        let me = Identity {
            host: host.into(),
            boot_id: format!("boot-{host}"),
            pid: 100 + r as u32,
            uuid: format!("{host}-gpu{gpu}"),
            bus_id: format!("0000:{:02x}:00.0", 0x19 + gpu),
            sms: 132,
        };
        let selector = Selector::from_spec("").unwrap();
        hello(
            r,
            world,
            Arch::SM90,
            &selector,
            None,
            &Options::default(),
            &me,
            "k",
        )
    }

    /// Every rank's row of a world, GPUs of one host reaching each other by
    /// NVLink.
    pub(crate) fn rows(hellos: &[Digest]) -> Vec<Vec<Reach>> {
        (0..hellos.len())
            .map(|r| row_of(r, hellos, |_| Ok(Reach::NvLink)).unwrap())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(pid: u32, uuid: &str) -> Identity {
        Identity {
            host: "h".into(),
            boot_id: "boot".into(),
            pid,
            uuid: uuid.into(),
            bus_id: "0000:19:00.0".into(),
            sms: 132,
        }
    }

    fn hellos(world: usize, dtype: &[Option<DType>]) -> Vec<Digest> {
        let selector = Selector::from_spec("").unwrap();
        (0..world)
            .map(|r| {
                hello(
                    r,
                    world,
                    Arch::SM90,
                    &selector,
                    dtype[r],
                    &Options::default(),
                    &identity(100 + r as u32, "gpu0"),
                    "k",
                )
            })
            .collect()
    }

    use super::fixtures::{hello_on, rows};

    #[test]
    fn two_hosts_of_four_ranks_form_an_nccl_only_world() {
        let hellos: Vec<Digest> = (0..8)
            .map(|r| hello_on(r, 8, if r < 4 { "a" } else { "b" }, r % 4))
            .collect();
        let reach = rows(&hellos);
        assert_eq!(reach[1][2], Reach::NvLink, "the same host");
        assert_eq!(
            reach[1][5],
            Reach::OtherHost,
            "another host, told by its boot id"
        );
        let uuids: Vec<String> = hellos
            .iter()
            .map(|h| h.get("uuid").unwrap().to_string())
            .collect();
        let decision = crate::protocol::reach::decide(&reach, &uuids);
        let why = decision.custom.unwrap_err();
        assert!(why.contains("through another host"), "{why}");
    }

    #[test]
    fn sixteen_ranks_on_one_host_form_an_nccl_only_world() {
        let hellos: Vec<Digest> = (0..16).map(|r| hello_on(r, 16, "a", r)).collect();
        let reach = rows(&hellos);
        assert!(reach.iter().flatten().all(|r| r.mappable()));
        let uuids: Vec<String> = hellos
            .iter()
            .map(|h| h.get("uuid").unwrap().to_string())
            .collect();
        let decision = crate::protocol::reach::decide(&reach, &uuids);
        assert_eq!(
            decision.custom,
            Err("a world of 16 ranks: the custom kernels serve up to 8".to_string())
        );
        // Eight ranks of one host run the custom kernels.
        let eight: Vec<Digest> = (0..8).map(|r| hello_on(r, 8, "a", r)).collect();
        let uuids: Vec<String> = eight
            .iter()
            .map(|h| h.get("uuid").unwrap().to_string())
            .collect();
        assert!(
            crate::protocol::reach::decide(&rows(&eight), &uuids)
                .custom
                .is_ok()
        );
    }

    #[test]
    fn agreeing_ranks_pass() {
        let h = hellos(3, &[Some(DType::Bf16); 3]);
        for r in 0..3 {
            check_hellos(r, &h[r], &h).unwrap();
        }
        assert_eq!(min_sms(&h).unwrap(), 132);
    }

    #[test]
    fn a_dtype_mismatch_names_the_field_and_both_values() {
        let h = hellos(2, &[Some(DType::Bf16), Some(DType::F16)]);
        let err = check_hellos(0, &h[0], &h).unwrap_err().to_string();
        assert!(
            err.contains("disagree on dtype: rank 1 has f16, rank 0 has bf16"),
            "{err}"
        );
    }

    #[test]
    fn a_rank_claimed_twice_or_misplaced_is_refused() {
        let h = hellos(2, &[None, None]);
        let selector = Selector::from_spec("").unwrap();
        let intruder = hello(
            0,
            2,
            Arch::SM90,
            &selector,
            None,
            &Options::default(),
            &identity(999, "gpu0"),
            "k",
        );
        let seen = vec![intruder, h[1].clone()];
        let err = check_hellos(0, &h[0], &seen).unwrap_err().to_string();
        assert!(err.contains("(pid 999) joined as rank 0"), "{err}");
        let swapped = vec![h[1].clone(), h[0].clone()];
        let err = check_hellos(0, &h[0], &swapped).unwrap_err().to_string();
        assert!(err.contains("says it is rank 1"), "{err}");
    }

    #[test]
    fn two_ranks_in_one_process_are_refused() {
        let selector = Selector::from_spec("").unwrap();
        let h: Vec<Digest> = (0..2)
            .map(|r| {
                hello(
                    r,
                    2,
                    Arch::SM90,
                    &selector,
                    None,
                    &Options::default(),
                    &identity(7, "gpu0"),
                    "k",
                )
            })
            .collect();
        let err = check_hellos(0, &h[0], &h).unwrap_err().to_string();
        assert!(err.contains("in one process"), "{err}");
    }

    /// `digest` with `field` set to `value` (the first occurrence is what
    /// lookups see, so the line is rewritten, not appended).
    fn with_field(digest: &Digest, field: &str, value: &str) -> Digest {
        let text = String::from_utf8(digest.encode()).unwrap();
        let prefix = format!("{field}=");
        let lines: Vec<String> = text
            .lines()
            .map(|line| match line.starts_with(&prefix) {
                true => format!("{prefix}{value}"),
                false => line.to_string(),
            })
            .collect();
        Digest::decode(lines.join("\n").as_bytes()).unwrap()
    }

    #[test]
    fn the_policy_fingerprint_covers_every_band_of_the_tables_in_use() {
        // This binary hands no tables over: policy's own are in use.
        let platforms = policy::tables_in_use().platforms();
        assert_eq!(platforms, policy::PLATFORMS);
        let text = format!("{platforms:?}");
        assert_eq!(policy_fingerprint(), fnv1a(text.as_bytes()));
        // What is hashed names every band of every table.
        for table in platforms.iter().flat_map(|p| p.tables) {
            assert!(text.contains(&format!("{:?}", table.bands)), "{table:?}");
        }
        // The same tables with one band's edge moved by a byte hash differently.
        let mut moved: Vec<policy::PlatformInfo> = platforms.to_vec();
        let mut tables = moved[0].tables.to_vec();
        let mut bands = tables[0].bands.to_vec();
        let band = bands.iter_mut().find(|b| b.max.is_some()).unwrap();
        band.max = band.max.map(|m| m + 1);
        tables[0].bands = Box::leak(bands.into_boxed_slice());
        moved[0].tables = Box::leak(tables.into_boxed_slice());
        assert_ne!(fnv1a(format!("{moved:?}").as_bytes()), policy_fingerprint());
    }

    #[test]
    fn ranks_selecting_with_other_tables_are_refused() {
        let h = hellos(2, &[None, None]);
        let ours = format!("{:016x}", policy_fingerprint());
        assert_eq!(h[0].get("policy_tables"), Some(ours.as_str()));
        let theirs = with_field(&h[1], "policy_tables", "00000000000000ff");
        let seen = vec![h[0].clone(), theirs];
        let err = check_hellos(0, &h[0], &seen).unwrap_err();
        assert!(matches!(err, Error::Mismatch(_)), "{err:?}");
        assert!(
            err.to_string().contains(&format!(
                "rank 1 and rank 0 disagree on policy_tables: rank 1 has 00000000000000ff, rank \
                 0 has {ours}"
            )),
            "{err}"
        );
    }
}
