//! The shape of a call of the fused all-reduce + add + RMSNorm: `tokens`
//! rows of `hidden` elements, the norm taken over each row. What a call may
//! pass is checked here, on the host, before anything is launched; the
//! kernels rely on it (kernels/cuda/prims.cu, "Rows").

pub use policy::{HIDDEN_MAX, HIDDEN_MIN, HIDDEN_STEP};

/// A fused call's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rows {
    pub tokens: usize,
    pub hidden: usize,
}

/// The rows of a call whose partial sums, residual and output hold `input`,
/// `residual` and `output` elements and whose weight holds `weight` (the
/// hidden size), with the norm's `eps`; or what is wrong, in words.
pub fn rows_of(
    input: usize,
    residual: usize,
    output: usize,
    weight: usize,
    eps: f32,
) -> Result<Rows, String> {
    let hidden = weight;
    if !(HIDDEN_MIN..=HIDDEN_MAX).contains(&hidden) || !hidden.is_multiple_of(HIDDEN_STEP) {
        return Err(format!(
            "the weight has {hidden} elements; the hidden size must be a multiple of \
             {HIDDEN_STEP} in {HIDDEN_MIN}..={HIDDEN_MAX}"
        ));
    }
    if residual != input || output != input {
        return Err(format!(
            "input has {input} elements, residual {residual}, output {output}: they must \
             be the same tokens x hidden"
        ));
    }
    if !input.is_multiple_of(hidden) {
        return Err(format!(
            "input has {input} elements, not a whole number of rows of hidden size {hidden} \
             (tokens x hidden != len)"
        ));
    }
    if !eps.is_finite() || eps < 0.0 {
        return Err(format!("eps is {eps}: it must be finite and not negative"));
    }
    Ok(Rows {
        tokens: input / hidden,
        hidden,
    })
}

/// How a launch of the fused kernels (and of the add + RMSNorm kernel of the
/// unfused path) lays its rows out: each row gets a group of `group` threads
/// (whole warps, one thread per pack, at most the block), a block holds
/// `groups` groups and launches `threads` threads: the groups' and, when
/// the launch asks for one and the block has room, a warp more for the
/// kernel's handshake lanes. The kernels take all three from their arguments
/// (kernels/cuda/prims.cu, "Rows"): this is the one place the layout is
/// decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowLaunch {
    pub threads: u32,
    pub group: u32,
    pub groups: u32,
}

/// The layout of `rows` rows of `row_packs` packs each on a grid of `blocks`
/// blocks of at most `most` threads. Rows are dealt to the blocks first, so
/// a block needs as many groups as the most rows a block takes in one pass,
/// and no more: a block's idle warps are not free, in a call of a few rows
/// (decode) they cost time in every block (kernels/GPU.md, "Rows").
///
/// `lanes_warp`: the kernel's handshake lanes (the last threads of its
/// block, one per peer: kernels/cuda/prims.cu, `lamport_handshake_peer`)
/// should hold no row, so the launch adds a warp after the groups when the
/// block has room for it. A lane that holds a pack checks its peer's call
/// before its first wait for data, so its check's memory latency comes
/// before its row's, and the rows' barrier waits for it: on one H200 the
/// fused one-shot's rows' barrier waited about 0.7 us for that warp at one
/// row, 1.4 us with its first input loaded early (kernels/GPU.md, "Rows").
pub fn row_launch(
    row_packs: u64,
    rows: u64,
    blocks: u32,
    most: u32,
    lanes_warp: bool,
) -> RowLaunch {
    let most = u64::from(most.max(32));
    let group = (row_packs.div_ceil(32) * 32).clamp(32, most);
    let per_block = rows.div_ceil(u64::from(blocks.max(1))).max(1);
    let groups = per_block.min(most / group);
    let rows_threads = group * groups;
    let lanes = if lanes_warp && rows_threads + 32 <= most {
        32
    } else {
        0
    };
    RowLaunch {
        threads: (rows_threads + lanes) as u32,
        group: group as u32,
        groups: groups as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_has_one_group_per_row_a_block_takes() {
        let launch = |packs, rows, blocks, most| {
            let l = row_launch(packs, rows, blocks, most, false);
            assert_eq!(l.threads, l.group * l.groups, "{l:?}");
            assert!(
                l.threads <= most && l.group.is_multiple_of(32) && l.groups >= 1,
                "{l:?}"
            );
            (l.threads, l.group, l.groups)
        };
        // hidden 4096 bf16: 512 packs a row. Up to one row per block: 512
        // threads; two rows per block: 1024; never more than the block.
        assert_eq!(launch(512, 1, 32, 1024), (512, 512, 1));
        assert_eq!(launch(512, 32, 32, 1024), (512, 512, 1));
        assert_eq!(launch(512, 33, 32, 1024), (1024, 512, 2));
        assert_eq!(launch(512, 640, 32, 1024), (1024, 512, 2));
        // A row longer than the block takes the whole block.
        assert_eq!(launch(2048, 1, 132, 1024), (1024, 1024, 1));
        assert_eq!(launch(1024, 3, 1, 512), (512, 512, 1));
        // Short rows: whole warps (hidden 72 bf16 is 9 packs); a group that
        // does not divide the block leaves its remainder unlaunched.
        assert_eq!(launch(9, 1, 32, 1024), (32, 32, 1));
        assert_eq!(launch(9, 100, 32, 1024), (128, 32, 4));
        assert_eq!(launch(320, 1000, 32, 1024), (960, 320, 3));
        // No rows still launches a group (the kernels' blocks only update
        // their call state).
        assert_eq!(launch(512, 0, 32, 1024), (512, 512, 1));
    }

    #[test]
    fn a_launch_with_lanes_gives_them_a_warp_of_their_own_when_the_block_has_room() {
        let launch = |packs, rows, blocks, most| {
            let l = row_launch(packs, rows, blocks, most, true);
            let without = row_launch(packs, rows, blocks, most, false);
            assert_eq!(
                (l.group, l.groups),
                (without.group, without.groups),
                "{l:?}"
            );
            assert!(l.threads <= most && l.threads.is_multiple_of(32), "{l:?}");
            (l.threads, l.group, l.groups)
        };
        // Decode rows of hidden 4096 bf16 (512 packs) in a world of two's
        // 1024-thread blocks: the rows' 512 threads and a lanes' warp.
        assert_eq!(launch(512, 1, 32, 1024), (544, 512, 1));
        assert_eq!(launch(512, 32, 32, 1024), (544, 512, 1));
        // Short rows: the warp after the groups.
        assert_eq!(launch(9, 100, 32, 1024), (160, 32, 4));
        assert_eq!(launch(320, 1000, 32, 1024), (992, 320, 3));
        // No room: the rows fill the block, and the lanes hold packs.
        assert_eq!(launch(512, 33, 32, 1024), (1024, 512, 2));
        assert_eq!(launch(1024, 1, 32, 1024), (1024, 1024, 1));
        assert_eq!(launch(2048, 1, 132, 512), (512, 512, 1));
    }

    #[test]
    fn whole_rows_of_an_allowed_hidden_size_are_taken() {
        assert_eq!(
            rows_of(4 * 4096, 4 * 4096, 4 * 4096, 4096, 1e-5),
            Ok(Rows {
                tokens: 4,
                hidden: 4096
            })
        );
        for hidden in [HIDDEN_MIN, 72, 5120, HIDDEN_MAX] {
            assert_eq!(
                rows_of(hidden, hidden, hidden, hidden, 0.0).map(|r| r.tokens),
                Ok(1)
            );
        }
        // No tokens: nothing to do, but not wrong.
        assert_eq!(rows_of(0, 0, 0, 64, 1e-6).map(|r| r.tokens), Ok(0));
    }

    #[test]
    fn what_is_wrong_is_said() {
        let err = |i, r, o, w, eps| rows_of(i, r, o, w, eps).unwrap_err();
        for hidden in [0, 8, 56, 68, HIDDEN_MAX + 8] {
            assert!(
                err(hidden, hidden, hidden, hidden, 1e-5).contains("hidden size"),
                "{hidden}"
            );
        }
        assert!(err(128, 64, 128, 64, 1e-5).contains("residual 64"));
        assert!(err(128, 128, 192, 64, 1e-5).contains("output 192"));
        assert!(err(96, 96, 96, 64, 1e-5).contains("tokens x hidden != len"));
        for eps in [f32::NAN, f32::INFINITY, -1e-6] {
            assert!(err(64, 64, 64, 64, eps).contains("eps"), "{eps}");
        }
    }
}
