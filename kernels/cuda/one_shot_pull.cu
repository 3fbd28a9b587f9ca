// one_shot_pull (all-reduce, all-gather) and the loopback reference collective.
//
// Each rank owns a staging region of two halves of `staging_bytes`; the pull
// family (one_shot_pull, two_shot_pull, the reference) alternates between them,
// the staging-use counter of the block call state picking the half (its parity).
//
// one_shot_pull moves a message that fits one half:
//   1. every block copies its packs of this rank's input into staging half h,
//      UNROLL packs per thread per step;
//   2. block barrier with the same block of every rank;
//   3. every block loads the SAME packs of every rank's half h, all ranks' packs
//      of a step at once, and reduces them (f32, ranks in order 0..W-1) or copies
//      them into the output.
// Pack j is owned by thread (j mod stride) in every step and phase, so a
// per-block barrier is enough: block b only reads what blocks b of all ranks
// wrote.
//
// No barrier at the end: half h is written again at the next use but one. Before
// block b of this rank writes half h again it has passed a barrier of the use in
// between, which needs block b of every peer to signal it in that use; a peer's
// block b runs the use in between only after the peer's kernel of the use
// before has ended (stream order; under programmatic launch, its
// griddepcontrol.wait), so every block of that peer has finished reading half h,
// whichever thread owned which unit in either use (the numbering may change
// between calls: prims.cu, first_unit). When block b had no work in the use in
// between (a smaller message), kernel order settles it too: this rank started
// the new use only after its kernel of the use in between ended, which needed
// block 0 of every peer to arrive in that use (block 0 always has work), so
// every peer had finished its kernel of the use before.
//
// Barrier values come from the block call state's 64-bit sequence counter,
// shared by every pull-family kernel: all ranks run the same sequence of calls
// on the same grid, so they agree on it without talking. A block with no packs
// skips the barrier (see block_has_work).

template <int W, typename E, bool REDUCE>
__device__ __forceinline__ void pull_collective(const CollArgs& a) {
    dependent_launch_prologue();
    const int SLOTS = World<W>::SLOTS;
    const int UNROLL = World<W>::UNROLL;
    u32* ctrl = ctrl_of(a, a.rank);
    // Dealt like the others (first_unit<W>; kernels/GPU.md has the A/B of
    // dealing for this kernel, which pays a barrier in every block with work).
    const u64 first = first_unit<W>(a);
    const u64 stride = thread_stride();
    const CallState& state = begin_call(ctrl);
    if (state.poisoned) {
        poison_output(a, !REDUCE, first, stride);
        return;
    }
    save_pull_state(ctrl, state, 1u, 1u);

    const u32 world = World<W>::size(a);
    const u64 half = (state.use & 1u) * a.staging_bytes;
    const u64 packs = a.bytes / 16u;
    const u64 step = stride * UNROLL;
    const bool aligned = a.io_aligned != 0u;
    const char* in = (const char*)a.input;
    char* out = (char*)a.output;
    char* my_stage = (char*)a.staging[a.rank] + half;

    // 1. Copy in.
    for (u64 base = first; base < packs; base += step) {
        Pack v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 i = base + u * stride;
            if (i < packs) v[u] = ld_io(in + i * 16u, aligned);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 i = base + u * stride;
            if (i < packs) st_pack(my_stage + i * 16u, v[u]);
        }
    }

    // 2. Barrier (block 0: with the call handshake); 3. read every rank's half.
    if (!block_has_work<W>(a, packs)) return;
    if (!block_barrier<W>(a, state.seq + 1u, CT_KERNEL_ONE_SHOT_PULL, CT_PHASE_BARRIER_1, blockIdx.x == 0, state.calls)) {
        poison_output(a, !REDUCE, first, stride);
        return;
    }
    for (u64 base = first; base < packs; base += step) {
        Pack v[UNROLL][SLOTS];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 i = base + u * stride;
            if (i >= packs) continue;
#pragma unroll
            for (int p = 0; p < SLOTS; ++p)
                if ((u32)p < world) v[u][p] = ld_pack_sys((const char*)a.staging[p] + half + i * 16u);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 i = base + u * stride;
            if (i >= packs) continue;
            if (REDUCE) {
                st_io(out + i * 16u, reduce_ranks<E, SLOTS>(v[u], world), aligned);
            } else {
#pragma unroll
                for (int p = 0; p < SLOTS; ++p)
                    if ((u32)p < world) st_io(out + (u64)p * a.bytes + i * 16u, v[u][p], aligned);
            }
        }
    }
}

CT_KERNEL colltune_one_shot_pull_all_reduce_bf16(const CollArgs a) { pull_collective<kWorld, Bf16, true>(a); }
CT_KERNEL colltune_one_shot_pull_all_reduce_f16(const CollArgs a) { pull_collective<kWorld, F16, true>(a); }
CT_KERNEL colltune_one_shot_pull_all_reduce_f32(const CollArgs a) { pull_collective<kWorld, F32, true>(a); }
CT_KERNEL colltune_one_shot_pull_all_gather(const CollArgs a) { pull_collective<kWorld, F32, false>(a); }
