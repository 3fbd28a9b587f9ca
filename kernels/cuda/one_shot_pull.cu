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
__device__ __forceinline__ void one_shot_pull(const CollArgs& a) {
    dependent_launch_prologue();
    const int UNROLL = World<W>::UNROLL;
    // Dealt like the others (first_unit<W>; kernels/GPU.md has the A/B of
    // dealing for this kernel, which pays a barrier in every block with work).
    const u64 first = first_unit<W>(a);
    const u64 stride = thread_stride();
    const CallState& state = begin_call(ctrl_of(a, a.rank));
    if (state.poisoned) {
        mark_failed(a, one_shot_outputs(a, !REDUCE), first, stride);
        return;
    }
    save_pull_state(ctrl_of(a, a.rank), state, 1u, 1u);
    const u64 packs = a.bytes / 16u;
    const u64 half = (state.use & 1u) * a.staging_bytes;
    auto staged = [&](u32 p, u64 i) { return (const char*)a.staging[p] + half + i * 16u; };

    // 1. Copy in.
    for (u64 base = first; base < packs; base += stride * UNROLL) {
        const Step s{base, stride, packs};
        Pack v[UNROLL];
        load_step(s, v, [&](u64 i) { return ld_io((const char*)a.input + i * 16u, a.io_aligned != 0u); });
        use_step(s, v, [&](u64 i, const Pack& p) { st_pack((char*)staged(a.rank, i), p); });
    }

    // 2. Barrier, with the call handshake.
    if (!block_has_work<W>(a, packs)) return;
    if (!block_barrier<W>(a, state.seq + 1u, CT_KERNEL_ONE_SHOT_PULL, CT_PHASE_BARRIER_1, true, state.calls)) {
        mark_failed(a, one_shot_outputs(a, !REDUCE), first, stride);
        return;
    }
    // 3. Read every rank's half.
    for (u64 base = first; base < packs; base += stride * UNROLL)
        receive_step<W, UNROLL, false>(
            a, Step{base, stride, packs}, CT_KERNEL_ONE_SHOT_PULL,
            [&](u64 i) { return ld_pack_sys(staged(a.rank, i)); }, staged,
            [&](u64 i, const Pack (&r)[World<W>::SLOTS]) { store_result<W, E, REDUCE>(a, i, r); });
}

CT_KERNEL colltune_one_shot_pull_all_reduce_bf16(const CollArgs a) { one_shot_pull<kWorld, Bf16, true>(a); }
CT_KERNEL colltune_one_shot_pull_all_reduce_f16(const CollArgs a) { one_shot_pull<kWorld, F16, true>(a); }
CT_KERNEL colltune_one_shot_pull_all_reduce_f32(const CollArgs a) { one_shot_pull<kWorld, F32, true>(a); }
CT_KERNEL colltune_one_shot_pull_all_gather(const CollArgs a) { one_shot_pull<kWorld, F32, false>(a); }
