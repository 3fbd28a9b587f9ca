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
__device__ __forceinline__ void two_shot_push(const CollArgs& a) {
    dependent_launch_prologue();
    const int UNROLL = World<W>::UNROLL;
    const u32 rank = a.rank;
    const u64 packs = a.bytes / 16u;
    const Shards sh{(packs + World<W>::size(a) - 1u) / World<W>::size(a), packs};
    const u64 first = first_unit<W>(a);
    const u64 stride = thread_stride();
    const bool aligned = a.io_aligned != 0u;
    const char* in = (const char*)a.input;
    char* out = (char*)a.output;
    // Pack j of input shard s, sentinel words replaced (the Lamport rule).
    auto input = [&](u32 s, u64 j) { return without_sentinel(ld_io(in + (s * sh.shard + j) * 16u, aligned)); };

    // The first scatter step's input does not depend on the call state: its
    // loads are in flight while thread 0 reads the state.
    Pack v[UNROLL][World<W>::SLOTS];
    load_shards<W, UNROLL>(a, Step{first, stride, sh.shard}, sh, v, input);
    CallState& state = begin_call(ctrl_of(a, rank));
    if (state.poisoned) {
        mark_failed(a, two_shot_outputs(a, sh.shard), first, stride);
        return;
    }
    // Bytes of every slot this call writes, which the next push-family call
    // re-arms (a world of one writes none).
    save_push_state(ctrl_of(a, rank), state, World<W>::size(a) > 1u ? 2u * sh.shard * 16u : 0u);
    const u64 buffer = (u64)state.push_phase * World<W>::size(a) * a.slot_bytes;
    const u64 my_slot = buffer + (u64)rank * a.slot_bytes;
    const char* mine = (const char*)a.push_bufs[rank] + buffer;

    // 1. Scatter: pack j of shard s goes to slot `rank` of rank s.
    for (u64 base = first; base < sh.shard; base += stride * UNROLL) {
        const Step st{base, stride, sh.shard};
        if (base != first) load_shards<W, UNROLL>(a, st, sh, v, input);
        use_shards<W, UNROLL>(a, st, sh, v, [&](u32 s, u64 j, const Pack& p) {
            lamport_push((char*)a.push_bufs[s] + my_slot + j * 16u, p);
        });
    }
    // Block 0 tells every peer what it calls; every block with work checks
    // what they call. (After the scatter stores: the threads that check a
    // peer's call check it before they wait for data, and small messages give
    // them none.)
    const bool has_work = block_has_work<W>(a, sh.shard);
    const u32 shake = lamport_handshake_peer<W>(a, has_work);
    if (shake != CT_NO_PEER && blockIdx.x == 0u) handshake_send(a, shake, state.calls);
    if (lamport_idle(state, previous_buffer(state.push_phase), first, sh.shard, shake)) return;
    // 2. Re-arm the previous push-family call's buffer.
    rearm_previous<W>(a, state, previous_buffer(state.push_phase), first, stride);

    // 3. Reduce shard `rank` as its copies land; send the sum to every peer.
    //    The handshake lanes check the peers' calls meanwhile (see
    //    one_shot_push.cu); a sum sent on from a peer making another call is
    //    never taken as a result: every rank checks every peer, and marks.
    bool agreed = true;  // a lane's verdict on its peer's call
    if (shake != CT_NO_PEER)
        agreed = handshake_check(a, shake, state.calls, CT_KERNEL_TWO_SHOT_PUSH, handshake_peek(a, shake));
    bool ok = agreed;
    const u64 own_first = rank * sh.shard;
    const u64 own = packs > own_first ? (packs - own_first < sh.shard ? packs - own_first : sh.shard) : 0u;
    for (u64 base = first; ok && base < own; base += stride * UNROLL)
        ok = receive_step<W, UNROLL, true>(
            a, Step{base, stride, own}, CT_KERNEL_TWO_SHOT_PUSH,
            [&](u64 j) { return input(rank, j); },
            [&](u32 p, u64 j) { return mine + (u64)p * a.slot_bytes + j * 16u; },
            [&](u64 j, const Pack (&r)[World<W>::SLOTS]) {
                const Pack sum = without_sentinel(reduce_ranks<E, World<W>::SLOTS>(r, World<W>::size(a)));
                st_io(out + (own_first + j) * 16u, sum, aligned);
                for_peers<W>(a, [&](u32 q) { lamport_push((char*)a.push_bufs[q] + my_slot + (sh.shard + j) * 16u, sum); });
            });

    // 4. Gather every other shard as its sum lands, then read the block's
    //    verdict on the peers' calls: a thread of a block that found another
    //    call marks what it stored.
    auto sum_of = [&](u32 s, u64 j) { return mine + (u64)s * a.slot_bytes + (sh.shard + j) * 16u; };
    for (u64 base = first; ok && base < sh.shard; base += stride * UNROLL) {
        const Step st{base, stride, sh.shard};
        load_shards<W, UNROLL>(a, st, sh, v, [&](u32 s, u64 j) { return ld_pack_sys(sum_of(s, j)); });
        ok = wait_shards<W, UNROLL>(a, st, sh, v, CT_KERNEL_TWO_SHOT_PUSH, sum_of);
        if (ok) store_shards<W, UNROLL>(a, st, sh, v);
    }
    ok = block_verdict(agreed) && ok;
    if (!ok) mark_failed(a, two_shot_outputs(a, sh.shard), first, stride);
}

CT_KERNEL colltune_two_shot_push_all_reduce_bf16(const CollArgs a) { two_shot_push<kWorld, Bf16>(a); }
CT_KERNEL colltune_two_shot_push_all_reduce_f16(const CollArgs a) { two_shot_push<kWorld, F16>(a); }
CT_KERNEL colltune_two_shot_push_all_reduce_f32(const CollArgs a) { two_shot_push<kWorld, F32>(a); }

// The fused all-reduce + add + RMSNorm, two-shot: the same scatter and
// reduction of shard `rank` as two_shot_push, then every rank normalises every
// row from the gathered sums:
//   1. scatter, 2. re-arm, as above;
//   3. reduce: pack j of shard `rank` from every rank in rank order, plus this
//      rank's residual: x, sentinel words replaced by 0, goes into slot `rank`
//      of every peer (packs [S, 2S), as the sums above) and into this rank's
//      own slot, packs [0, S) (where no rank ever scatters: a rank's own copy
//      of its shard is its input);
//   4. normalise: rows as the unit of work (prims.cu, "Rows"): each thread
//      polls x of its packs of its rows from the slot of the rank whose shard
//      holds it, re-arms the packs of its own slot it read (no other rank
//      writes there, and the next call through this buffer is three calls
//      away), stores x into the residual, and once its block has every pack
//      of its rows stores the row's RMSNorm times the weight.
// Every x was summed once, by the rank of its shard, with that rank's
// residual, and every rank normalises the same x the same way: all ranks hold
// the same bits (the sums' sentinel words replaced on every rank, the rule of
// this algorithm). Shards are cut by packs, not rows: only step 4 needs whole
// rows. In-place calls are safe: a rank writes output and residual pack i only
// after x of it arrived, which its shard's rank sent only after it had read
// every rank's input and its residual of pack i. A world of one scatters
// nothing: it adds and normalises its own rows.
//
// A failed call: steps 3 and 4 give a pack to two threads by two mappings
// (shards, rows), so a block that fails in step 4 may mark a pack of shard
// `rank` (the residual, and in place the input) while another block's step-3
// thread has yet to read it, and would send every peer an x built from the
// marks: a peer whose data had all arrived would finish its call Ok with
// them. So a step-3 thread leaves in its own slot, for every pack whose x it
// will not send (its block failed or was poisoned), the mark (all-ones)
// instead of x; and a row thread marks a pack of shard `rank` only once that
// own-slot pack holds x or the mark (bounded: mark_failed_own_rows). The own
// slot is polled in step 4 anyway, so the success path only counts the packs
// it took there and tells the mark from x (no sum is all-ones: the f32 sum
// and its conversion give canonical NaNs).

// The mark of a pack whose x a step-3 thread will not send: every 32-bit word
// all-ones, never the sentinel.
__device__ __forceinline__ bool is_failed_mark(const Pack& v) {
    return (v.w[0] & v.w[1] & v.w[2] & v.w[3]) == 0xffffffffu;
}

// Step 3's packs of shard `rank` this thread will not send, from `j` on
// (grid-stride, below `own`): the mark in the own slot, so that the row
// threads waiting for them stop. Not inlined (the cold path), on scalars.
__device__ __noinline__ void mark_unsent_own_packs(char* own_slot, u64 j, u64 stride, u64 own) {
    Pack nan;
#pragma unroll
    for (int k = 0; k < 4; ++k) nan.w[k] = 0xffffffffu;
    for (; j < own; j += stride) st_pack_sys(own_slot + j * 16u, nan);
}

// mark_failed_row_packs for a failed two_shot_push_add_rmsnorm: the same
// packs, but one of shard `rank` only once its step-3 thread is done reading
// it, i.e. once its pack of the own slot (`push` + `own_slot` bytes) holds x
// or the mark, unless it is one of the first `taken` of them, which this
// thread already took from there (and re-armed). The wait is bounded by
// `timeout_ns` over all of this thread's packs: the step-3 threads' own waits
// stop as soon as their rank has failed, which it has. Not inlined (the cold
// path), on scalars; the shard is worked out again here, so that the kernel
// keeps nothing of it live through step 4.
__device__ __noinline__ void mark_failed_own_rows(char* out, char* residual, bool aligned, u64 rows, u32 row_packs,
                                                  u32 group, u32 groups, u64 push, u64 own_slot, u64 bytes,
                                                  u32 world, u32 rank, u32 taken, u64 timeout_ns) {
    Pack nan;
#pragma unroll
    for (int k = 0; k < 4; ++k) nan.w[k] = 0xffffffffu;
    const u32 g = threadIdx.x / group;
    if (g >= groups) return;
    const u64 packs = bytes / 16u;
    const u64 shard = (packs + world - 1u) / world;
    const u64 own_first = rank * shard;
    const u64 own = packs > own_first ? (packs - own_first < shard ? packs - own_first : shard) : 0u;
    const char* slot = (const char*)push + own_slot;
    u32 met = 0;    // packs of shard `rank` met so far, in the order step 4 takes them
    u64 start = 0;  // when the first wait began
    for (u64 first = first_row_of_block(); row_of_group(first, g) < rows; first += (u64)gridDim.x * groups)
        for (u32 p = threadIdx.x - g * group; p < row_packs; p += group) {
            const u64 i = row_of_group(first, g) * row_packs + p;
            const u64 j = i - own_first;  // wraps below own_first: then j >= own
            if (j < own && met++ >= taken) {
                if (start == 0) start = globaltimer_ns();
                while (has_sentinel(ld_pack_sys(slot + j * 16u)) && globaltimer_ns() - start <= timeout_ns) {
                }
            }
            st_io(out + i * 16u, nan, aligned);
            st_io(residual + i * 16u, nan, aligned);
        }
}

template <int W, typename E>
__device__ __forceinline__ void two_shot_push_add_rmsnorm(const CollArgs& a) {
    dependent_launch_prologue();
    const u32 rank = a.rank;
    const u64 packs = a.bytes / 16u;
    const Shards sh{(packs + World<W>::size(a) - 1u) / World<W>::size(a), packs};
    const u64 first = first_unit<W>(a);
    const u64 stride = thread_stride();
    const bool aligned = a.io_aligned != 0u;
    const char* in = (const char*)a.input;
    const char* res = (const char*)a.residual;
    auto input = [&](u32 s, u64 j) { return without_sentinel(ld_io(in + (s * sh.shard + j) * 16u, aligned)); };
    // Shard `rank`: packs own_first .. own_first + own.
    const u64 own_first = rank * sh.shard;
    const u64 own = packs > own_first ? (packs - own_first < sh.shard ? packs - own_first : sh.shard) : 0u;

    Pack v[World<W>::UNROLL][World<W>::SLOTS];
    load_shards<W, World<W>::UNROLL>(a, Step{first, stride, sh.shard}, sh, v, input);
    CallState& state = begin_call(ctrl_of(a, rank));
    const u64 buffer = (u64)state.push_phase * World<W>::size(a) * a.slot_bytes;
    const u64 my_slot = buffer + (u64)rank * a.slot_bytes;
    const char* mine = (const char*)a.push_bufs[rank] + buffer;
    char* const own_slot = (char*)a.push_bufs[rank] + my_slot;
    if (state.poisoned) {
        // This block's step-3 threads send nothing: the mark, for the row
        // threads of blocks that began before the fault (one the host wrote
        // while this call ran). Its own rows are marked at once: a block that
        // sees the fault as it begins cannot tell one of this call from an
        // earlier call's, after which no block reads anything.
        if (World<W>::size(a) > 1u) mark_unsent_own_packs(own_slot, first, stride, own);
        mark_failed_rows<E>(a);
        return;
    }
    if (World<W>::size(a) == 1u) {
        save_push_state(ctrl_of(a, rank), state, 0u);
        const char* sum = in;
        const bool ok = norm_rows<E, 1, false>(a, true, true, [&](u64 i, Pack& x) {
            PackAcc<E> acc;
            acc.first(without_sentinel(ld_io(sum + i * 16u, aligned)));
            acc.add(ld_io(res + i * 16u, aligned));
            x = without_sentinel(acc.result());
            return true;
        });
        if (!ok) mark_failed_rows<E>(a);
        return;
    }
    save_push_state(ctrl_of(a, rank), state, 2u * sh.shard * 16u);

    // 1. Scatter: pack j of shard s goes to slot `rank` of rank s.
    for (u64 base = first; base < sh.shard; base += stride * World<W>::UNROLL) {
        const Step st{base, stride, sh.shard};
        if (base != first) load_shards<W, World<W>::UNROLL>(a, st, sh, v, input);
        use_shards<W, World<W>::UNROLL>(a, st, sh, v, [&](u32 s, u64 j, const Pack& p) {
            lamport_push((char*)a.push_bufs[s] + my_slot + j * 16u, p);
        });
    }
    // Lanes in every block that uses peers' data: a block with shard work
    // (steps 1 and 3) or with rows (step 4, which rows_of deals to blocks by
    // another rule). A block with work and no lanes would find no verdict.
    const u32 shake = lamport_handshake_peer<W>(a, block_has_work<W>(a, sh.shard) || rows_of<E>(a).block_has_work());
    if (shake != CT_NO_PEER && blockIdx.x == 0u) handshake_send(a, shake, state.calls);
    // 2. Re-arm the previous push-family call's buffer.
    rearm_previous<W>(a, state, previous_buffer(state.push_phase), first, stride);

    // 3. Reduce shard `rank` with this rank's residual; send x to every rank.
    //    `base`: this thread's first pack of the shard whose x is not sent.
    bool ok = true;
    if (shake != CT_NO_PEER)
        ok = handshake_check(a, shake, state.calls, CT_KERNEL_TWO_SHOT_PUSH, handshake_peek(a, shake));
    u64 base = first;
    while (ok && base < own) {
        ok = receive_step<W, World<W>::UNROLL, true>(
            a, Step{base, stride, own}, CT_KERNEL_TWO_SHOT_PUSH,
            [&](u64 j) { return input(rank, j); },
            [&](u32 p, u64 j) { return mine + (u64)p * a.slot_bytes + j * 16u; },
            [&](u64 j, const Pack (&q)[World<W>::SLOTS]) {
                const Pack x = without_sentinel(
                    add_residual<E, World<W>::SLOTS>(q, World<W>::size(a), ld_io(res + (own_first + j) * 16u, aligned)));
                for_peers<W>(a, [&](u32 s) {
                    lamport_push((char*)a.push_bufs[s] + my_slot + (sh.shard + j) * 16u, x);
                });
                lamport_push(own_slot + j * 16u, x);
            });
        if (ok) base += stride * World<W>::UNROLL;
    }
    // The failing step sent none of its packs (receive_step uses them only
    // once all have arrived).
    if (!ok) mark_unsent_own_packs(own_slot, base, stride, own);

    // 4. Normalise every row as its sums land. `taken`: the packs of shard
    //    `rank` this thread took from its own slot (and re-armed).
    u32 taken = 0u;
    ok = norm_rows<E, 1, false>(a, ok, true, [&](u64 i, Pack& x) {
        const u32 s = (u32)(i / sh.shard);
        const u64 j = i - (u64)s * sh.shard;
        const char* at = mine + (u64)s * a.slot_bytes + (s == rank ? j : sh.shard + j) * 16u;
        x = ld_pack_sys(at);
        Deadline deadline(a.timeout_ns);
        if (!lamport_wait(x, at, deadline, a, s, CT_KERNEL_TWO_SHOT_PUSH)) return false;
        if (s == rank) {
            // Its step-3 thread failed (and its rank's fault is recorded).
            if (is_failed_mark(x)) return false;
            st_pack((char*)at, sentinel_pack());
            ++taken;
        }
        return true;
    });
    // The lanes' verdict on the peers' calls entered norm_rows' first barrier
    // (before any output of the block's rows was stored): a block with rows
    // and a lane that found another call marks them. A block with shard work
    // and no rows stores no output.
    if (!ok) {
        const Rows r = rows_of<E>(a);
        mark_failed_own_rows((char*)a.output, (char*)a.residual, a.io_aligned != 0u, r.rows, r.row_packs, r.group,
                             r.groups, a.push_bufs[rank],
                             ((u64)state.push_phase * World<W>::size(a) + rank) * a.slot_bytes, a.bytes,
                             World<W>::size(a), rank, taken, a.timeout_ns);
    }
}

CT_KERNEL_ONE_BLOCK colltune_two_shot_push_all_reduce_add_rmsnorm_bf16(const CollArgs a) {
    two_shot_push_add_rmsnorm<kWorld, Bf16>(a);
}
CT_KERNEL_ONE_BLOCK colltune_two_shot_push_all_reduce_add_rmsnorm_f16(const CollArgs a) {
    two_shot_push_add_rmsnorm<kWorld, F16>(a);
}
CT_KERNEL_ONE_BLOCK colltune_two_shot_push_all_reduce_add_rmsnorm_f32(const CollArgs a) {
    two_shot_push_add_rmsnorm<kWorld, F32>(a);
}
