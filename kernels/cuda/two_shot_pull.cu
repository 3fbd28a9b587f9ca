// two_shot_pull: all-reduce as a reduce-scatter then an all-gather, both moved
// by stores into peers' staging halves (remote stores are posted, remote loads
// wait a round trip), two barriers, and no copy of the input into staging.
//
// The message of P packs is cut into W shards of S = ceil(P / W) packs (the last
// shards may be short or empty, so any P works). A staging half of rank r holds
// two areas of W x S packs (the host sizes halves for it, see
// protocol::layout::two_shot_half_bytes):
//   scatter area, slot q: rank q's copy of shard r;
//   gather area, slot s:  shard s reduced by rank s.
// Pack j of every shard is owned by thread (j mod stride), so every phase below
// gives a pack to the same thread (and block) on every rank:
//   1. scatter: for every peer s, copy pack j of input shard s into slot `rank`
//      of the scatter area of rank s;
//   2. barrier 1 (block b with block b of every rank): every rank's copy of
//      shard `rank` has landed here;
//   3. reduce: pack j of shard `rank` from every rank (this rank's own from its
//      input) in rank order; write the sum to the output and into slot `rank` of
//      the gather area of every peer;
//   4. barrier 2: every peer's reduced shard has landed here;
//   5. gather: copy pack j of every other shard from the gather area to the
//      output.
// Every rank's output shard s was summed once, by rank s, so all ranks hold the
// same bits. A thread reads input pack i (phase 1 or 3) before it writes output
// pack i (phase 3 or 5), which makes in-place calls safe.
//
// Reuse of a half: this rank writes into a peer's half h only in phases 1 and 3
// of a use of h; the peer read that half for the previous use of h before it
// started its kernel of the use in between, whose barrier this rank's block
// passed, or — when that block had no work — which this rank's previous kernel
// waited for through block 0 (see one_shot_pull.cu). Neither needs the same thread to
// own the same units in both uses.

template <int W, typename E>
__device__ __forceinline__ void two_shot_pull(const CollArgs& a) {
    dependent_launch_prologue();
    const int UNROLL = World<W>::UNROLL;
    const u64 first = first_unit<W>(a);
    const u64 stride = thread_stride();
    const u64 packs = a.bytes / 16u;
    const Shards sh{(packs + World<W>::size(a) - 1u) / World<W>::size(a), packs};
    const CallState& state = begin_call(ctrl_of(a, a.rank));
    if (state.poisoned) {
        mark_failed(a, two_shot_outputs(a, sh.shard), first, stride);
        return;
    }
    save_pull_state(ctrl_of(a, a.rank), state, 2u, 1u);
    const u32 rank = a.rank;
    const u64 area = (u64)World<W>::size(a) * sh.shard * 16u;  // bytes of one area
    const u64 half = (state.use & 1u) * a.staging_bytes;
    const bool aligned = a.io_aligned != 0u;
    const char* in = (const char*)a.input;
    char* out = (char*)a.output;
    const char* my_half = (const char*)a.staging[rank] + half;
    Pack v[UNROLL][World<W>::SLOTS];

    // 1. Scatter every other shard to its owner.
    for (u64 base = first; base < sh.shard; base += stride * UNROLL) {
        const Step st{base, stride, sh.shard};
        load_shards<W, UNROLL>(a, st, sh, v, [&](u32 s, u64 j) { return ld_io(in + (s * sh.shard + j) * 16u, aligned); });
        use_shards<W, UNROLL>(a, st, sh, v, [&](u32 s, u64 j, const Pack& p) {
            st_pack((char*)a.staging[s] + half + ((u64)rank * sh.shard + j) * 16u, p);
        });
    }

    // A block with no packs has nothing to wait for (see block_has_work).
    if (!block_has_work<W>(a, sh.shard)) return;
    // 2. Barrier 1, with the call handshake.
    bool ok = block_barrier<W>(a, state.seq + 1u, CT_KERNEL_TWO_SHOT_PULL, CT_PHASE_BARRIER_1, true, state.calls);
    if (ok) {
        // 3. Reduce shard `rank`; send the sum to every peer.
        const u64 mine = rank * sh.shard;
        const u64 own = packs > mine ? (packs - mine < sh.shard ? packs - mine : sh.shard) : 0u;
        for (u64 base = first; base < own; base += stride * UNROLL)
            receive_step<W, UNROLL, false>(
                a, Step{base, stride, own}, CT_KERNEL_TWO_SHOT_PULL,
                [&](u64 j) { return ld_io(in + (mine + j) * 16u, aligned); },
                [&](u32 p, u64 j) { return my_half + (p * sh.shard + j) * 16u; },
                [&](u64 j, const Pack (&r)[World<W>::SLOTS]) {
                    const Pack sum = reduce_ranks<E, World<W>::SLOTS>(r, World<W>::size(a));
                    st_io(out + (mine + j) * 16u, sum, aligned);
                    for_peers<W>(a, [&](u32 q) { st_pack((char*)a.staging[q] + half + area + (mine + j) * 16u, sum); });
                });
        // 4. Barrier 2; 5. gather the other shards.
        ok = block_barrier<W>(a, state.seq + 2u, CT_KERNEL_TWO_SHOT_PULL, CT_PHASE_BARRIER_2);
        for (u64 base = first; ok && base < sh.shard; base += stride * UNROLL) {
            const Step st{base, stride, sh.shard};
            load_shards<W, UNROLL>(a, st, sh, v,
                                   [&](u32 s, u64 j) { return ld_pack_sys(my_half + area + (s * sh.shard + j) * 16u); });
            store_shards<W, UNROLL>(a, st, sh, v);
        }
    }
    if (!ok) mark_failed(a, two_shot_outputs(a, sh.shard), first, stride);
}

CT_KERNEL colltune_two_shot_pull_all_reduce_bf16(const CollArgs a) { two_shot_pull<kWorld, Bf16>(a); }
CT_KERNEL colltune_two_shot_pull_all_reduce_f16(const CollArgs a) { two_shot_pull<kWorld, F16>(a); }
CT_KERNEL colltune_two_shot_pull_all_reduce_f32(const CollArgs a) { two_shot_pull<kWorld, F32>(a); }
