// two_shot_push: all-reduce as a reduce-scatter then an all-gather, both moved
// as Lamport data (one_shot_push.cu) through the push region and its three-buffer
// rotation, with no barrier at all: every pack is its own arrival signal, so a
// pack is reduced as soon as its copies have landed and sent on at once, and the
// gather copy overlaps the transfers instead of trailing a barrier.
//
// The message of P packs is cut into W shards of S = ceil(P / W) packs (the last
// shards may be short or empty). Slot q of rank s's buffer, written only by rank
// q, holds:
//   packs [0, S):  rank q's copy of shard s (scatter);
//   packs [S, 2S): shard q as reduced by rank q (gather).
// The host sizes slots for it (protocol::registry::two_shot_push_slot_bytes)
// and declines a call that does not fit. Call k of a rank (k counted by the push
// family's call state, shared with one_shot_push):
//   1. scatter: for every peer s, pack j of input shard s, sentinel words
//      replaced by 0, into slot `rank` of rank s's buffer k%3;
//   2. re-arms its own buffer (k+2)%3 as far as the previous push-family call
//      used it (why nobody writes there meanwhile: see one_shot_push.cu);
//   3. reduce: pack j of shard `rank` from every rank (its own from its input,
//      the others polled from its buffer) in rank order; the sum, sentinel words
//      replaced by 0, goes to the output and into slot `rank` of every peer;
//   4. gather: polls every other shard's reduced pack j and stores it.
// Every rank's output shard s was summed once, by rank s, and all ranks store
// the same bits (the sum's sentinel words replaced on every rank: the contract's
// rule for this algorithm). Pack j of every shard is handled by the same thread
// in every phase, which makes in-place calls safe (inputs are read in phases 1
// and 3, before the same thread writes those outputs in phases 3 and 4).

template <int W, typename E>
__device__ __forceinline__ void two_shot_push_all_reduce(const CollArgs& a) {
    dependent_launch_prologue();
    const int SLOTS = World<W>::SLOTS;
    const int UNROLL = World<W>::UNROLL;
    u32* ctrl = ctrl_of(a, a.rank);
    const u32 world = World<W>::size(a);
    const u32 rank = a.rank;
    const u64 packs = a.bytes / 16u;
    const u64 shard = (packs + world - 1u) / world;
    const u64 first = first_unit<W>(a);
    const u64 stride = thread_stride();
    const u64 step = stride * UNROLL;
    const bool aligned = a.io_aligned != 0u;
    const char* in = (const char*)a.input;
    char* out = (char*)a.output;

    // The first scatter step's input does not depend on the call state: its
    // loads are in flight while thread 0 reads the state.
    Pack send[UNROLL][SLOTS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        const u64 j = first + u * stride;
#pragma unroll
        for (int s = 0; s < SLOTS; ++s) {
            const u64 i = (u64)s * shard + j;
            if ((u32)s < world && (u32)s != rank && j < shard && i < packs)
                send[u][s] = without_sentinel(ld_io(in + i * 16u, aligned));
        }
    }
    const CallState& state = begin_call(ctrl);
    if (state.poisoned) {
        poison_output(a, false, first, stride);
        return;
    }
    // Bytes of every slot this call writes, which the next push-family call
    // re-arms (a world of one writes none).
    save_push_state(ctrl, state, world > 1u ? 2u * shard * 16u : 0u);
    const u32 phase = state.push_phase;
    const u32 rearm = (phase + 2u) % 3u;
    const u64 buffer_bytes = (u64)world * a.slot_bytes;
    const u64 my_slot = (u64)phase * buffer_bytes + (u64)rank * a.slot_bytes;
    const char* mine = (const char*)a.push_bufs[rank] + (u64)phase * buffer_bytes;
    // 1. Scatter: pack j of shard s goes to slot `rank` of rank s.
    for (u64 base = first; base < shard; base += step) {
        if (base != first) {
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                const u64 j = base + u * stride;
#pragma unroll
                for (int s = 0; s < SLOTS; ++s) {
                    const u64 i = (u64)s * shard + j;
                    if ((u32)s < world && (u32)s != rank && j < shard && i < packs)
                        send[u][s] = without_sentinel(ld_io(in + i * 16u, aligned));
                }
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 j = base + u * stride;
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                const u64 i = (u64)s * shard + j;
                if ((u32)s < world && (u32)s != rank && j < shard && i < packs)
                    lamport_push((char*)a.push_bufs[s] + my_slot + j * 16u, send[u][s]);
            }
        }
    }

    // Block 0 tells every peer what it calls. (After its scatter stores: the
    // threads that check a peer's call check it before they wait for data, and
    // small messages give them none.)
    if (lamport_handshake_peer<W>(a) != CT_NO_PEER) handshake_send(a, lamport_handshake_peer<W>(a), state.calls);

    // 2. Re-arm the previous push-family call's buffer (see one_shot_push.cu for why it
    //    is quiet).
    const u64 used_packs = (u64)state.used_bytes(rearm) / 16u;
    char* stale = (char*)a.push_bufs[rank] + (u64)rearm * buffer_bytes;
#pragma unroll
    for (int p = 0; p < SLOTS; ++p)
        if ((u32)p < world && (u32)p != rank) lamport_rearm(stale + (u64)p * a.slot_bytes, used_packs, first, stride);

    // 3. Reduce shard `rank` as its copies land; send the sum to every peer.
    // The peer's call is checked before any wait for data (see one_shot_push.cu).
    bool ok = true;
    const u32 shake = lamport_handshake_peer<W>(a);
    if (shake != CT_NO_PEER) ok = handshake_check(a, shake, state.calls, CT_KERNEL_TWO_SHOT_PUSH, handshake_peek(a, shake));
    for (u64 base = first; ok && base < shard; base += step) {
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
                    v[u][p] = without_sentinel(ld_io(in + i * 16u, aligned));
                else
                    v[u][p] = ld_pack_sys(mine + (u64)p * a.slot_bytes + j * 16u);
            }
        }
        Deadline deadline(a.timeout_ns);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 j = base + u * stride;
            const u64 i = (u64)rank * shard + j;
            if (j >= shard || i >= packs) continue;
#pragma unroll
            for (int p = 0; p < SLOTS; ++p) {
                if ((u32)p >= world || (u32)p == rank || !ok) continue;
                ok = lamport_wait(v[u][p], mine + (u64)p * a.slot_bytes + j * 16u, deadline, a, p,
                                  CT_KERNEL_TWO_SHOT_PUSH);
            }
        }
        if (!ok) break;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 j = base + u * stride;
            const u64 i = (u64)rank * shard + j;
            if (j >= shard || i >= packs) continue;
            const Pack sum = without_sentinel(reduce_ranks<E, SLOTS>(v[u], world));
            st_io(out + i * 16u, sum, aligned);
#pragma unroll
            for (int p = 0; p < SLOTS; ++p)
                if ((u32)p < world && (u32)p != rank)
                    lamport_push((char*)a.push_bufs[p] + my_slot + (shard + j) * 16u, sum);
        }
    }

    // 4. Gather every other shard as its sum lands.
    for (u64 base = first; ok && base < shard; base += step) {
        Pack v[UNROLL][SLOTS];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 j = base + u * stride;
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                const u64 i = (u64)s * shard + j;
                if ((u32)s < world && (u32)s != rank && j < shard && i < packs)
                    v[u][s] = ld_pack_sys(mine + (u64)s * a.slot_bytes + (shard + j) * 16u);
            }
        }
        Deadline deadline(a.timeout_ns);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 j = base + u * stride;
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                const u64 i = (u64)s * shard + j;
                if ((u32)s >= world || (u32)s == rank || j >= shard || i >= packs || !ok) continue;
                ok = lamport_wait(v[u][s], mine + (u64)s * a.slot_bytes + (shard + j) * 16u, deadline, a, s,
                                  CT_KERNEL_TWO_SHOT_PUSH);
            }
        }
        if (!ok) break;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const u64 j = base + u * stride;
#pragma unroll
            for (int s = 0; s < SLOTS; ++s) {
                const u64 i = (u64)s * shard + j;
                if ((u32)s < world && (u32)s != rank && j < shard && i < packs) st_io(out + i * 16u, v[u][s], aligned);
            }
        }
    }
    if (!ok) poison_output(a, false, first, stride);
}

CT_KERNEL colltune_two_shot_push_all_reduce_bf16(const CollArgs a) { two_shot_push_all_reduce<kWorld, Bf16>(a); }
CT_KERNEL colltune_two_shot_push_all_reduce_f16(const CollArgs a) { two_shot_push_all_reduce<kWorld, F16>(a); }
CT_KERNEL colltune_two_shot_push_all_reduce_f32(const CollArgs a) { two_shot_push_all_reduce<kWorld, F32>(a); }
