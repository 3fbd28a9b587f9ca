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
__device__ __forceinline__ void two_shot_all_reduce(const CollArgs& a) {
    dependent_launch_prologue();
    const int SLOTS = World<W>::SLOTS;
    const int UNROLL = World<W>::UNROLL;
    u32* ctrl = ctrl_of(a, a.rank);
    const u64 first = first_unit<W>(a);
    const u64 stride = thread_stride();
    const CallState& state = begin_call(ctrl);
    if (state.poisoned) {
        poison_output(a, false, first, stride);
        return;
    }
    save_pull_state(ctrl, state, 2u, 1u);

    const u32 world = World<W>::size(a);
    const u32 rank = a.rank;
    const u64 half = (state.use & 1u) * a.staging_bytes;
    const u64 packs = a.bytes / 16u;
    const u64 shard = (packs + world - 1u) / world;
    const u64 area = (u64)world * shard * 16u;  // bytes of one area
    const u64 step = stride * UNROLL;
    const bool aligned = a.io_aligned != 0u;
    const char* in = (const char*)a.input;
    char* out = (char*)a.output;
    const char* my_half = (const char*)a.staging[rank] + half;

    // 1. Scatter every other shard to its owner.
    for (u64 base = first; base < shard; base += step) {
        Pack v[UNROLL][SLOTS];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 j = base + u * stride;
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                const u64 i = (u64)s * shard + j;
                if ((u32)s < world && (u32)s != rank && j < shard && i < packs) v[u][s] = ld_io(in + i * 16u, aligned);
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 j = base + u * stride;
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                const u64 i = (u64)s * shard + j;
                if ((u32)s < world && (u32)s != rank && j < shard && i < packs)
                    st_pack((char*)a.staging[s] + half + ((u64)rank * shard + j) * 16u, v[u][s]);
            }
        }
    }

    // A block with no packs has nothing to wait for (see block_has_work).
    if (!block_has_work<W>(a, shard)) return;

    // Barrier 1 (block 0: with the call handshake).
    bool ok = block_barrier<W>(a, state.seq + 1u, CT_KERNEL_TWO_SHOT_PULL, CT_PHASE_BARRIER_1, blockIdx.x == 0,
                               state.calls);
    if (ok) {
        // 3. Reduce shard `rank`; send the sum to every peer.
        for (u64 base = first; base < shard; base += step) {
            Pack v[UNROLL][SLOTS];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const u64 j = base + u * stride;
                const u64 i = (u64)rank * shard + j;
                if (j >= shard || i >= packs) continue;
#pragma unroll
                for (int p = 0; p < SLOTS; ++p) {
                    if ((u32)p >= world) continue;
                    if ((u32)p == rank)
                        v[u][p] = ld_io(in + i * 16u, aligned);
                    else
                        v[u][p] = ld_pack_sys(my_half + ((u64)p * shard + j) * 16u);
                }
            }
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const u64 j = base + u * stride;
                const u64 i = (u64)rank * shard + j;
                if (j >= shard || i >= packs) continue;
                const Pack sum = reduce_ranks<E, SLOTS>(v[u], world);
                st_io(out + i * 16u, sum, aligned);
#pragma unroll
                for (int p = 0; p < SLOTS; ++p)
                    if ((u32)p < world && (u32)p != rank)
                        st_pack((char*)a.staging[p] + half + area + ((u64)rank * shard + j) * 16u, sum);
            }
        }

        ok = block_barrier<W>(a, state.seq + 2u, CT_KERNEL_TWO_SHOT_PULL, CT_PHASE_BARRIER_2);
        if (ok) {
            // 5. Gather the other shards.
            for (u64 base = first; base < shard; base += step) {
                Pack v[UNROLL][SLOTS];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const u64 j = base + u * stride;
#pragma unroll
                    for (int s = 0; s < SLOTS; ++s) {
                        const u64 i = (u64)s * shard + j;
                        if ((u32)s < world && (u32)s != rank && j < shard && i < packs)
                            v[u][s] = ld_pack_sys(my_half + area + ((u64)s * shard + j) * 16u);
                    }
                }
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    const u64 j = base + u * stride;
#pragma unroll
                    for (int s = 0; s < SLOTS; ++s) {
                        const u64 i = (u64)s * shard + j;
                        if ((u32)s < world && (u32)s != rank && j < shard && i < packs)
                            st_io(out + i * 16u, v[u][s], aligned);
                    }
                }
            }
        }
    }
    if (!ok) poison_output(a, false, first, stride);
}

CT_KERNEL colltune_two_shot_pull_all_reduce_bf16(const CollArgs a) { two_shot_all_reduce<kWorld, Bf16>(a); }
CT_KERNEL colltune_two_shot_pull_all_reduce_f16(const CollArgs a) { two_shot_all_reduce<kWorld, F16>(a); }
CT_KERNEL colltune_two_shot_pull_all_reduce_f32(const CollArgs a) { two_shot_all_reduce<kWorld, F32>(a); }
