// add_rmsnorm: the second step of the fused all-reduce + add + RMSNorm's
// unfused path (the first is the all-reduce its table picks, which leaves the
// sums in the output). Communicates nothing: for every row, x = sum + residual
// (f32, rounded once) goes into the residual and x's RMSNorm times the weight
// into the output, in place over the sums, with the fused kernels' rows
// (prims.cu, "Rows"): whole warps per row, 16-byte accesses, the row's sum of
// squares reduced in a fixed order.
//
// A rank that has failed (the all-reduce just before it, or any call before
// that) leaves no word of either output looking like a result: it marks both,
// as the collective kernels mark theirs. A world whose kernels have no control
// block (none was registered) has no such record; its calls fail on the host.

// The most packs of a row a thread keeps in registers (norm_rows): a row of
// 4096 f32 is two packs a thread of a 512-thread block. Four spill at the
// 64 registers a thread of a world of two's 1024-thread blocks has.
constexpr u32 kNormRegPacks = CT_MAX_THREADS >= 1024 ? 2u : 4u;

template <typename E>
__device__ __forceinline__ void add_rmsnorm(const CollArgs& a) {
    dependent_launch_prologue();
    // The rank's fault word is read while the rows load, not before: its
    // verdict enters the rows' barrier, before any output of the block is
    // stored (the residual stored before it is marked with the rest). Read
    // first, it cost a memory latency on every call (kernels/GPU.md, "Rows").
    const bool healthy =
        threadIdx.x != 0u || a.ctrls[a.rank] == 0ull || ld_u32_sys(ctrl_of(a, a.rank) + CT_CTRL_ERROR) == 0u;
    const bool aligned = a.io_aligned != 0u;
    const char* sum = (const char*)a.input;
    const char* res = (const char*)a.residual;
    const bool ok = norm_rows<E, kNormRegPacks, true>(a, true, healthy, [&](u64 i, Pack& x) {
        PackAcc<E> acc;
        acc.first(ld_io(sum + i * 16u, aligned));
        acc.add(ld_io(res + i * 16u, aligned));
        x = acc.result();
        return true;
    });
    if (!ok) mark_failed_rows<E>(a);
}

CT_KERNEL_ONE_BLOCK colltune_add_rmsnorm_bf16(const CollArgs a) { add_rmsnorm<Bf16>(a); }
CT_KERNEL_ONE_BLOCK colltune_add_rmsnorm_f16(const CollArgs a) { add_rmsnorm<F16>(a); }
CT_KERNEL_ONE_BLOCK colltune_add_rmsnorm_f32(const CollArgs a) { add_rmsnorm<F32>(a); }
