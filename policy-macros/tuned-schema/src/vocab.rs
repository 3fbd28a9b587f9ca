//! The vocabulary every part of the project speaks: which collective, on which
//! platform, with which algorithm. These are plain `Copy` types whose methods are
//! `const fn` where that is possible, so the generated selection tables in `policy`
//! can use them in `const` items.
//!
//! Each enum has exactly one spelling in TOML files, command lines and logs:
//! [`Collective::name`], [`Link::name`], … and the matching `from_name`.

/// A tensor-parallel collective operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Collective {
    /// Every rank ends with the element-wise sum of all ranks' inputs.
    AllReduce,
    /// Every rank ends with all ranks' inputs concatenated in rank order.
    AllGather,
    /// The all-reduce a row-parallel projection ends with, fused with the
    /// residual add and the RMSNorm that follow it in a decoder: every rank
    /// holds `tokens × hidden` partial sums, a residual and the norm's weight,
    /// and ends with the new residual `Σ input + residual` and its RMSNorm
    /// times the weight. Its size is the per-rank input's (as all-reduce's).
    AllReduceAddRmsNorm,
}

impl Collective {
    /// Every collective, in declaration order.
    pub const ALL: [Collective; 3] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::AllReduceAddRmsNorm,
    ];

    /// The spelling in TOML files, command lines and logs (`all_reduce`).
    pub const fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::AllReduceAddRmsNorm => "all_reduce_add_rmsnorm",
        }
    }

    /// What runs a call no table answers, and every call an algorithm
    /// declines: plain NCCL for the collectives NCCL has; for
    /// [`Collective::AllReduceAddRmsNorm`] the unfused path
    /// ([`Algo::Unfused`]: the all-reduce its own table picks, then an add +
    /// RMSNorm kernel). It takes any size and never declines.
    pub const fn fallback(self) -> Algo {
        match self {
            Collective::AllReduce | Collective::AllGather => Algo::Nccl,
            Collective::AllReduceAddRmsNorm => Algo::Unfused,
        }
    }

    /// The collective spelled `name` ([`Collective::name`]); `None` for any
    /// other text.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The algorithms that implement this collective, in [`Algo::ALL`] order
    /// (its [`fallback`](Collective::fallback) among them).
    pub const fn algos(self) -> &'static [Algo] {
        let (all, n) = match self {
            Collective::AllReduce => &ALL_REDUCE_ALGOS,
            Collective::AllGather => &ALL_GATHER_ALGOS,
            Collective::AllReduceAddRmsNorm => &FUSED_NORM_ALGOS,
        };
        all.split_at(*n).0
    }

    /// The size of a call's output when each of `world_size` ranks contributes
    /// `per_rank` (bytes or elements): `per_rank` for all-reduce (and the fused
    /// all-reduce + add + RMSNorm, whose every output is as large as its
    /// input), `world_size × per_rank` for all-gather. The one conversion between the two sizes
    /// ([`Query::bytes`] is an output size); [`Collective::per_rank_size`] is
    /// its inverse.
    pub const fn output_size(self, world_size: u64, per_rank: u64) -> u64 {
        per_rank * self.shares(world_size)
    }

    /// What each of `world_size` ranks contributes to an output of `output`
    /// (bytes or elements): `output` for all-reduce, `output / world_size`
    /// (rounded down) for all-gather.
    pub const fn per_rank_size(self, world_size: u64, output: u64) -> u64 {
        output / self.shares(world_size)
    }

    /// How many ranks' contributions the output holds side by side.
    const fn shares(self, world_size: u64) -> u64 {
        match self {
            Collective::AllReduce | Collective::AllReduceAddRmsNorm => 1,
            Collective::AllGather => world_size,
        }
    }
}

/// A compute-capability bucket such as `sm90` (9.0) or `sm103` (10.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Arch {
    /// The compute capability's major version (9 for sm90).
    pub major: u8,
    /// The compute capability's minor version (3 for sm103).
    pub minor: u8,
}

impl Arch {
    /// Ampere (A100): compute capability 8.0.
    pub const SM80: Arch = Arch::from_compute_capability(8, 0);
    /// Hopper (H100, H200): compute capability 9.0.
    pub const SM90: Arch = Arch::from_compute_capability(9, 0);
    /// Blackwell (B200): compute capability 10.0.
    pub const SM100: Arch = Arch::from_compute_capability(10, 0);

    /// The bucket of a device with compute capability `major.minor`.
    pub const fn from_compute_capability(major: u8, minor: u8) -> Arch {
        Arch { major, minor }
    }

    /// The arch-fallback rule, written once: of the architectures that have a
    /// file for a link (`available`), the one whose file answers queries for
    /// `self` — `self` itself, else the same major's highest minor not above
    /// `self`'s (sm103 uses sm100), else none (and then every query selects
    /// NCCL). The interpreter, the generated `table_arch` and the generated
    /// `select`'s platform lookup are all derived from this.
    pub fn answered_by(self, available: impl IntoIterator<Item = Arch>) -> Option<Arch> {
        available
            .into_iter()
            .filter(|a| a.major == self.major && a.minor <= self.minor)
            .max_by_key(|a| a.minor)
    }

    /// Parses `sm80`, `sm90`, `sm100`, `sm103`: the last digit is the minor
    /// version. `None` for anything else (`sm9`, `sm09`, `90`).
    pub fn from_name(name: &str) -> Option<Self> {
        let digits = name.strip_prefix("sm")?;
        if digits.len() < 2 || digits.len() > 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if digits.starts_with('0') {
            return None;
        }
        let (major, minor) = digits.split_at(digits.len() - 1);
        Some(Arch {
            major: major.parse().ok()?,
            minor: minor.parse().ok()?,
        })
    }

    /// `sm90`, `sm103`, …
    pub fn name(self) -> String {
        format!("sm{}{}", self.major, self.minor)
    }
}

impl core::fmt::Display for Arch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "sm{}{}", self.major, self.minor)
    }
}

/// How the GPUs of a world reach each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Link {
    /// Every pair of the world's GPUs is connected by NVLink.
    NvLink,
    /// Anything short of that: some pair reaches each other over PCIe only,
    /// or cannot map each other's memory at all.
    Pcie,
    /// All ranks on one GPU: validates protocols and kernels, never link timing.
    Loopback,
}

impl Link {
    /// Every link, in declaration order.
    pub const ALL: [Link; 3] = [Link::NvLink, Link::Pcie, Link::Loopback];

    /// The spelling in TOML files, command lines and logs (`nvlink`).
    pub const fn name(self) -> &'static str {
        match self {
            Link::NvLink => "nvlink",
            Link::Pcie => "pcie",
            Link::Loopback => "loopback",
        }
    }

    /// The link spelled `name` ([`Link::name`]); `None` for any other text.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// Element type of the tensors. Custom kernels accumulate in f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DType {
    /// bfloat16, 2 bytes.
    Bf16,
    /// IEEE half precision, 2 bytes.
    F16,
    /// IEEE single precision, 4 bytes.
    F32,
}

impl DType {
    /// Every element type, in declaration order.
    pub const ALL: [DType; 3] = [DType::Bf16, DType::F16, DType::F32];

    /// The spelling in TOML files, command lines and logs (`bf16`).
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
        }
    }

    /// The element type spelled `name` ([`DType::name`]); `None` for any
    /// other text.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bytes of one element.
    pub const fn size_bytes(self) -> u64 {
        match self {
            DType::Bf16 | DType::F16 => 2,
            DType::F32 => 4,
        }
    }
}

/// Whether the call is replayed from a CUDA graph or launched eagerly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Mode {
    /// Captured into a CUDA graph and replayed from it.
    Graph,
    /// Launched on the stream when the call is made.
    Eager,
}

impl Mode {
    /// Every mode, in declaration order.
    pub const ALL: [Mode; 2] = [Mode::Graph, Mode::Eager];

    /// The spelling in TOML files, command lines and logs (`graph`).
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Graph => "graph",
            Mode::Eager => "eager",
        }
    }

    /// The mode spelled `name` ([`Mode::name`]); `None` for any other text.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Whether an algorithm is a library's collective, the library's collective on
/// a registered window, a kernel of this project, or other calls composed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AlgoKind {
    /// A library's collective (NCCL): takes any size, never declines.
    Library,
    /// The library's collective on buffers it registered as a symmetric
    /// window when the world was built: sizes up to the window, declines to
    /// the plain collective beyond it (or where the world has no window).
    Window,
    /// A custom kernel of `kernels` (one registry entry and one `.cu` file).
    Kernel,
    /// Other calls in a row, each chosen the way it is on its own: takes any
    /// size, never declines (the unfused all-reduce + add + RMSNorm).
    Composite,
}

/// The algorithms: one line each, the only place an algorithm is named in the
/// vocabulary. Its enum variant, name (in TOML files, command lines, logs,
/// kernel file and entry-point names), kind, the collectives it implements
/// and the capacity `kernels` gives it where a platform file declares none
/// all come from its line. Adding an algorithm: ARCHITECTURE.md, "Adding an algorithm".
macro_rules! algorithms {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $name:literal {
            kind: $kind:ident,
            collectives: [$($collective:ident),+],
            capacity: $capacity:expr $(,)?
        }
    ),+ $(,)?) => {
        /// An implementation of a collective.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        #[non_exhaustive]
        pub enum Algo {
            $( $(#[$doc])* $variant, )+
        }

        impl Algo {
            /// Every algorithm, in declaration order (NCCL first).
            pub const ALL: [Algo; [$($name),+].len()] = [$(Algo::$variant),+];

            /// The spelling in TOML files, command lines, logs, kernel file
            /// and entry-point names (`one_shot_pull`).
            pub const fn name(self) -> &'static str {
                match self {
                    $(Algo::$variant => $name,)+
                }
            }

            /// Whether it is NCCL's plain collective, NCCL on a window, or a
            /// custom kernel.
            pub const fn kind(self) -> AlgoKind {
                match self {
                    $(Algo::$variant => AlgoKind::$kind,)+
                }
            }

            /// Whether this algorithm implements `collective`.
            pub const fn implements(self, collective: Collective) -> bool {
                match self {
                    $(Algo::$variant => {
                        $(if matches!(collective, Collective::$collective) {
                            return true;
                        })+
                        false
                    })+
                }
            }

            /// Bytes of output `kernels` assumes it takes where a platform
            /// file declares no capacity.
            const fn built_in_capacity(self) -> u64 {
                match self {
                    $(Algo::$variant => $capacity,)+
                }
            }
        }
    };
}

const MIB: u64 = 1024 * 1024;

algorithms! {
    /// NCCL through cudarc: always available, the fallback of every decline
    /// of the collectives it has.
    Nccl = "nccl" {
        kind: Library,
        collectives: [AllReduce, AllGather],
        capacity: u64::MAX,
    },
    /// Lamport-style: write into every peer's sentinel-armed buffer, no barrier
    /// (fused with add + RMSNorm: every rank sums and normalises every token).
    OneShotPush = "one_shot_push" {
        kind: Kernel,
        collectives: [AllReduce, AllGather, AllReduceAddRmsNorm],
        capacity: 8 * MIB,
    },
    /// Copy into a registered buffer, flag barrier, read every peer.
    OneShotPull = "one_shot_pull" {
        kind: Kernel,
        collectives: [AllReduce, AllGather],
        capacity: 16 * MIB,
    },
    /// Reduce-scatter then all-gather through registered buffers (all-reduce only).
    TwoShotPull = "two_shot_pull" {
        kind: Kernel,
        collectives: [AllReduce],
        capacity: 64 * MIB,
    },
    /// Reduce-scatter then all-gather by Lamport-style pushes into every peer's
    /// sentinel-armed buffer, no barrier (all-reduce only, plain or fused with
    /// add + RMSNorm, where the gathered sums are normalised on every rank; it
    /// shares the push region with `one_shot_push`).
    TwoShotPush = "two_shot_push" {
        kind: Kernel,
        collectives: [AllReduce, AllReduceAddRmsNorm],
        capacity: 8 * MIB,
    },
    /// NCCL on a symmetric window (`ncclMemAlloc` + `ncclCommWindowRegister`
    /// with `NCCL_WIN_COLL_SYMMETRIC`, NCCL 2.27 and later), which NCCL runs
    /// with its low-latency symmetric kernels; the window is as large as the
    /// capacity.
    NcclSymmetric = "nccl_symmetric" {
        kind: Window,
        collectives: [AllReduce, AllGather],
        capacity: 64 * MIB,
    },
    /// The fused collective unfused: the all-reduce the all-reduce table picks
    /// for the size (a custom kernel or NCCL, declining as it does), then
    /// `kernels`' own add + RMSNorm kernel on the rank's stream. What every
    /// fused call no table answers or a kernel declines runs.
    Unfused = "unfused" {
        kind: Composite,
        collectives: [AllReduceAddRmsNorm],
        capacity: u64::MAX,
    },
}

/// The algorithms that implement `collective`, in [`Algo::ALL`] order, and
/// how many there are (the array's tail is padding).
const fn implementing(collective: Collective) -> ([Algo; Algo::ALL.len()], usize) {
    let mut out = [Algo::Nccl; Algo::ALL.len()];
    let (mut i, mut n) = (0, 0);
    while i < Algo::ALL.len() {
        if Algo::ALL[i].implements(collective) {
            out[n] = Algo::ALL[i];
            n += 1;
        }
        i += 1;
    }
    (out, n)
}

static ALL_REDUCE_ALGOS: ([Algo; Algo::ALL.len()], usize) = implementing(Collective::AllReduce);
static ALL_GATHER_ALGOS: ([Algo; Algo::ALL.len()], usize) = implementing(Collective::AllGather);
static FUSED_NORM_ALGOS: ([Algo; Algo::ALL.len()], usize) =
    implementing(Collective::AllReduceAddRmsNorm);

impl Algo {
    /// The algorithm spelled `name` ([`Algo::name`]); `None` for any other
    /// text.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.name() == name)
    }

    /// True for every algorithm but a collective's fallback (plain NCCL, the
    /// unfused composite): it has a capacity, and a call it cannot take (too
    /// large, misaligned, a world without what it needs) declines to the
    /// collective's [`fallback`](Collective::fallback).
    pub const fn is_custom(self) -> bool {
        !matches!(self.kind(), AlgoKind::Library | AlgoKind::Composite)
    }

    /// True for the kernels written in this project (a registry entry and a
    /// `.cu` file each).
    pub const fn is_kernel(self) -> bool {
        matches!(self.kind(), AlgoKind::Kernel)
    }

    /// `const`-usable equality (derived `PartialEq` is not `const`).
    pub const fn same_as(self, other: Algo) -> bool {
        self as u8 == other as u8
    }

    /// `const`-usable membership test, for `[[assert]]` checks in generated code.
    pub const fn is_in(self, set: &[Algo]) -> bool {
        let mut i = 0;
        while i < set.len() {
            if self.same_as(set[i]) {
                return true;
            }
            i += 1;
        }
        false
    }
}

/// The capacity `kernels` assumes for an algorithm on a platform whose file
/// does not declare one (or that has no file at all): the capacity of its
/// line in [`Algo`]'s table, aligned to [`DEFAULT_ALIGN`]. A library's
/// collective takes any size (`max_bytes = u64::MAX`, `align = 1`); an
/// algorithm that does not implement the collective takes nothing
/// (`max_bytes = 0`), so `accepts` is false for every size. A composite
/// takes any size, as a library's collective does.
pub const fn default_capacity(collective: Collective, algo: Algo) -> Capacity {
    if !algo.implements(collective) {
        return Capacity {
            max_bytes: 0,
            align: 1,
        };
    }
    match algo.kind() {
        AlgoKind::Library | AlgoKind::Composite => Capacity {
            max_bytes: u64::MAX,
            align: 1,
        },
        AlgoKind::Window | AlgoKind::Kernel => Capacity {
            max_bytes: algo.built_in_capacity(),
            align: DEFAULT_ALIGN,
        },
    }
}

/// The bytes every custom kernel moves per rank at a time (a 16-byte vector).
pub const PACK_BYTES: u64 = 16;

/// Alignment of every custom algorithm unless a platform file says otherwise:
/// whole packs.
pub const DEFAULT_ALIGN: u64 = PACK_BYTES;

/// Fewest elements of a row (the hidden size) of
/// [`Collective::AllReduceAddRmsNorm`].
pub const HIDDEN_MIN: usize = 64;
/// Most elements of a row of [`Collective::AllReduceAddRmsNorm`] (a
/// kernel's row is in flight in one block).
pub const HIDDEN_MAX: usize = 16384;
/// A row of [`Collective::AllReduceAddRmsNorm`] is a multiple of this many
/// elements, so that it is whole 16-byte packs in every dtype (8 × 2 bytes,
/// or 2 packs of f32).
pub const HIDDEN_STEP: usize = 8;

/// How large a message a custom algorithm takes on a platform, and the size
/// granularity it needs. Sizes outside this are declined and run on NCCL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Capacity {
    /// Largest message, in bytes of the collective's output.
    pub max_bytes: u64,
    /// Every accepted message size is a multiple of this many bytes.
    pub align: u64,
}

impl Capacity {
    /// The largest capacity a file may declare (1 TiB): the kernels size
    /// their registered buffers from capacities, and nothing larger is a
    /// message a GPU of today holds, so a larger one is a typo or an
    /// overflow waiting to happen.
    pub const MAX_BYTES: u64 = 1 << 40;

    /// Whether a message of `bytes` fits this capacity and alignment.
    pub const fn accepts(self, bytes: u64) -> bool {
        bytes > 0 && bytes <= self.max_bytes && bytes.is_multiple_of(self.align)
    }

    /// Whether a call of `collective` over `world_size` ranks with an output of
    /// `bytes` fits. For all-gather the alignment applies to each rank's share
    /// (`bytes / world_size`), since that is what each rank moves.
    pub const fn accepts_message(
        self,
        collective: Collective,
        world_size: u32,
        bytes: u64,
    ) -> bool {
        match collective {
            Collective::AllReduce | Collective::AllReduceAddRmsNorm => self.accepts(bytes),
            Collective::AllGather => {
                let w = world_size as u64;
                w > 0
                    && bytes.is_multiple_of(w)
                    && bytes <= self.max_bytes
                    && self.accepts_share(collective.per_rank_size(w, bytes))
            }
        }
    }

    const fn accepts_share(self, share: u64) -> bool {
        share > 0 && share.is_multiple_of(self.align)
    }
}

/// One collective call, as the selection tables see it.
///
/// `bytes` is the size of the collective's output in bytes: for all-reduce the
/// tensor's size, for all-gather the gathered tensor (world size × each rank's
/// input), for the fused all-reduce + add + RMSNorm each rank's input
/// (tokens × hidden × element size).
///
/// A query is a table key (`collective`, `world_size`, `dtype`, `mode`:
/// [`Query::key`]), a platform (`arch`, `link`) and a size. The one way to build
/// a query from its parts is [`TableKey::query`] ([`Query::new`] spells the
/// same thing out field by field), and [`Query::key`] is the way back.
///
/// ```
/// use tuned_schema::{Arch, Collective, DType, Link, Mode, Query, TableKey};
///
/// const KEY: TableKey = TableKey {
///     collective: Collective::AllReduce,
///     world_size: 8,
///     dtype: DType::Bf16,
///     mode: Mode::Graph,
/// };
/// const Q: Query = KEY.query(Arch::SM90, Link::NvLink, 1 << 20);
/// assert_eq!(Q.key(), KEY);
/// assert_eq!(Q.key.world_size, 8);
/// assert_eq!(
///     Q,
///     Query::new(
///         Collective::AllReduce,
///         Arch::SM90,
///         Link::NvLink,
///         8,
///         DType::Bf16,
///         Mode::Graph,
///         1 << 20
///     )
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Query {
    /// The table that answers this query within its platform's file.
    pub key: TableKey,
    /// The GPUs' architecture; a platform file of the same major may answer
    /// for it ([`Arch::answered_by`]).
    pub arch: Arch,
    /// How the world's GPUs reach each other.
    pub link: Link,
    /// Bytes of the collective's output.
    pub bytes: u64,
}

impl Query {
    /// The query of `bytes` for `collective` on `world_size` ranks of `dtype`
    /// in `mode`, on platform (`arch`, `link`): `TableKey { .. }.query(arch,
    /// link, bytes)` written out.
    pub const fn new(
        collective: Collective,
        arch: Arch,
        link: Link,
        world_size: u32,
        dtype: DType,
        mode: Mode,
        bytes: u64,
    ) -> Query {
        TableKey {
            collective,
            world_size,
            dtype,
            mode,
        }
        .query(arch, link, bytes)
    }

    /// The key of the table that answers this query within its platform's file.
    pub const fn key(self) -> TableKey {
        self.key
    }
}

/// What a table is selected by, within one platform: everything of a [`Query`]
/// but the platform and the size.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableKey {
    /// The collective called.
    pub collective: Collective,
    /// Ranks in the world.
    pub world_size: u32,
    /// Element type of the tensors.
    pub dtype: DType,
    /// Replayed from a CUDA graph or launched eagerly.
    pub mode: Mode,
}

impl TableKey {
    /// The query of `bytes` on this key, on platform (`arch`, `link`).
    pub const fn query(self, arch: Arch, link: Link, bytes: u64) -> Query {
        Query {
            key: self,
            arch,
            link,
            bytes,
        }
    }
}

/// `all_reduce ws8 bf16 graph`: how a key is named in messages and reports.
impl core::fmt::Display for TableKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{} ws{} {} {}",
            self.collective.name(),
            self.world_size,
            self.dtype.name(),
            self.mode.name()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Collective::ALL {
            assert_eq!(Collective::from_name(c.name()), Some(c));
        }
        for l in Link::ALL {
            assert_eq!(Link::from_name(l.name()), Some(l));
        }
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        for m in Mode::ALL {
            assert_eq!(Mode::from_name(m.name()), Some(m));
        }
        for a in Algo::ALL {
            assert_eq!(Algo::from_name(a.name()), Some(a));
        }
        assert_eq!(Algo::from_name("ring"), None);
    }

    #[test]
    fn arch_names() {
        assert_eq!(Arch::from_name("sm90"), Some(Arch::SM90));
        assert_eq!(Arch::from_name("sm100"), Some(Arch::SM100));
        assert_eq!(
            Arch::from_name("sm103"),
            Some(Arch::from_compute_capability(10, 3))
        );
        assert_eq!(Arch::SM80.name(), "sm80");
        assert_eq!(Arch::from_name("sm9"), None);
        assert_eq!(Arch::from_name("90"), None);
        assert_eq!(Arch::from_name("sm09"), None);
        assert_eq!(Arch::from_name("smx0"), None);
    }

    #[test]
    fn two_shot_is_all_reduce_only() {
        for two_shot in [Algo::TwoShotPull, Algo::TwoShotPush] {
            assert!(two_shot.implements(Collective::AllReduce));
            assert!(!two_shot.implements(Collective::AllGather));
            assert!(!Collective::AllGather.algos().contains(&two_shot));
            assert!(Collective::AllReduce.algos().contains(&two_shot));
        }
    }

    #[test]
    fn the_fused_collective_falls_back_to_the_unfused_path() {
        let fused = Collective::AllReduceAddRmsNorm;
        assert_eq!(fused.name(), "all_reduce_add_rmsnorm");
        assert_eq!(
            fused.algos(),
            [Algo::OneShotPush, Algo::TwoShotPush, Algo::Unfused]
        );
        assert_eq!(fused.fallback(), Algo::Unfused);
        assert_eq!(Collective::AllReduce.fallback(), Algo::Nccl);
        assert_eq!(Collective::AllGather.fallback(), Algo::Nccl);
        for c in Collective::ALL {
            // A fallback implements its collective, has no capacity and never
            // declines; NCCL and the unfused path are nobody else's.
            let fallback = c.fallback();
            assert!(fallback.implements(c) && !fallback.is_custom(), "{c:?}");
            assert!(default_capacity(c, fallback).accepts(u64::MAX - 1));
            for &a in c.algos() {
                assert_eq!(a.is_custom(), a != fallback, "{c:?} {a:?}");
            }
        }
        assert!(!Algo::Unfused.implements(Collective::AllReduce));
        assert!(!Algo::Nccl.implements(fused));
        // Sizes are the per-rank input's, aligned as all-reduce's.
        assert_eq!(fused.output_size(8, 4096), 4096);
        assert_eq!(fused.per_rank_size(8, 4096), 4096);
        let c = Capacity {
            max_bytes: 1024,
            align: 16,
        };
        assert!(c.accepts_message(fused, 8, 16));
        assert!(!c.accepts_message(fused, 8, 24));
    }

    #[test]
    fn output_and_per_rank_sizes() {
        let (ar, ag) = (Collective::AllReduce, Collective::AllGather);
        assert_eq!(ar.output_size(4, 1024), 1024);
        assert_eq!(ag.output_size(4, 1024), 4096);
        assert_eq!(ar.per_rank_size(4, 4096), 4096);
        assert_eq!(ag.per_rank_size(4, 4096), 1024);
        assert_eq!(ag.per_rank_size(4, 4099), 1024);
    }

    #[test]
    fn is_in_matches_membership() {
        let custom = [Algo::OneShotPush, Algo::OneShotPull, Algo::TwoShotPull];
        for a in Algo::ALL {
            assert_eq!(a.is_in(&custom), custom.contains(&a));
            assert!(!a.is_in(&[]));
        }
    }

    #[test]
    fn default_capacities() {
        const MIB: u64 = 1024 * 1024;
        let ar = Collective::AllReduce;
        let ag = Collective::AllGather;
        assert_eq!(default_capacity(ar, Algo::OneShotPush).max_bytes, 8 * MIB);
        assert_eq!(default_capacity(ar, Algo::OneShotPull).max_bytes, 16 * MIB);
        assert_eq!(default_capacity(ar, Algo::TwoShotPull).max_bytes, 64 * MIB);
        assert_eq!(default_capacity(ar, Algo::TwoShotPush).max_bytes, 8 * MIB);
        assert!(!default_capacity(ag, Algo::TwoShotPush).accepts(16));
        assert_eq!(default_capacity(ag, Algo::OneShotPush).max_bytes, 8 * MIB);
        assert_eq!(default_capacity(ag, Algo::OneShotPull).max_bytes, 16 * MIB);
        assert_eq!(default_capacity(ar, Algo::OneShotPull).align, 16);
        assert!(default_capacity(ar, Algo::Nccl).accepts(u64::MAX));
        assert!(default_capacity(ag, Algo::Nccl).accepts(3));
        assert!(!default_capacity(ag, Algo::TwoShotPull).accepts(16));
    }

    #[test]
    fn a_query_and_its_key() {
        let key = TableKey {
            collective: Collective::AllGather,
            world_size: 4,
            dtype: DType::F16,
            mode: Mode::Eager,
        };
        let q = key.query(Arch::SM90, Link::Pcie, 4096);
        assert_eq!((q.arch, q.link, q.bytes), (Arch::SM90, Link::Pcie, 4096));
        assert_eq!(q.key(), key);
        assert_eq!(key.to_string(), "all_gather ws4 f16 eager");
    }

    #[test]
    fn capacity_accepts() {
        let c = Capacity {
            max_bytes: 1024,
            align: 16,
        };
        assert!(c.accepts(16));
        assert!(c.accepts(1024));
        assert!(!c.accepts(0));
        assert!(!c.accepts(1040));
        assert!(!c.accepts(24));
        assert!(c.accepts_message(Collective::AllGather, 4, 64));
        assert!(!c.accepts_message(Collective::AllGather, 4, 32));
        assert!(!c.accepts_message(Collective::AllGather, 4, 2048));
    }
}
