// one_shot_push: Lamport-style all-reduce and all-gather. No barrier at all: the
// arrival of the data is the synchronisation.
//
// Each rank owns a push region of 3 buffers; buffer b holds `world` slots of
// `slot_bytes`, slot p receiving rank p's data (a rank's own slot is never
// written: it reads its own contribution from its input). Every word of a peer
// slot is armed with the sentinel before it is written. Call k (k = this rank's
// count of push calls, kept mod 3 in each block's call state so it never wraps
// badly):
//   1. writes this rank's input, sentinel words replaced by 0, into slot `rank`
//      of buffer k%3 on every peer, 16-byte relaxed.sys stores, UNROLL packs
//      per thread per step so that many stores are in flight;
//   2. re-arms the peer slots of its own buffer (k+2)%3, i.e. the buffer of call
//      k-1, for as many bytes per slot as call k-1 used (block call state);
//   3. loads, per step, UNROLL packs of every rank at once (peers' from its own
//      buffer k%3, its own from its input), then polls the ones that still hold
//      a sentinel word until they arrive, and reduces (f32, ranks in order) or
//      copies them to the output. Every word is its own "arrived" bit, so torn
//      16-byte stores cannot be mistaken for complete ones.
//
// Why nobody writes into buffer (k+2)%3 while it is re-armed: a peer writes into
// this rank's buffer j%3 only during its own call j, and it can only finish call
// j after receiving this rank's data of call j. This rank is in call k, so every
// peer is in call k+1 at most and writes buffer k%3 or (k+1)%3, never
// (k+2)%3 == (k-1)%3. Every peer write of call k-1 into this rank has landed:
// this rank saw each of those words arrive before it finished call k-1. The
// buffer stays quiet until peers reach call k+2, which needs this rank's data of
// call k+1, sent only after this kernel (re-arm stores included) has completed,
// so the re-arm stores reach this GPU's memory before any later peer write.
//
// A unit (pack index i) is handled by the same thread in steps 1 and 3, which
// makes in-place calls safe: its input is read before its output is written.

template <int W, typename E, bool REDUCE>
__device__ __forceinline__ void one_shot_push(const CollArgs& a) {
    dependent_launch_prologue();
    const int UNROLL = World<W>::UNROLL;
    // This rank's control block, taken from the arguments first: thread 0's
    // call-state loads (begin_call) need it, and with it known this early the
    // compiler issues them before the first step's input loads below, so the
    // two latencies overlap. Taken where begin_call needs it, it was read only
    // after the input loads, and on sm_90 thread 0 issued its state loads
    // once its input had arrived (without_sentinel waits for it): two memory
    // latencies in a row before the block's barrier.
    u32* const ctrl = ctrl_of(a, a.rank);
    const u64 packs = a.bytes / 16u;
    const u64 first = first_unit<W>(a);
    const u64 stride = thread_stride();
    const char* in = (const char*)a.input;
    // This rank's contribution: its input with sentinel words replaced.
    auto input = [&](u64 i) { return without_sentinel(ld_io(in + i * 16u, a.io_aligned != 0u)); };

    // The first step's input does not depend on the call state: its loads are
    // in flight while thread 0 reads the state.
    Pack v[UNROLL];
    load_step(Step{first, stride, packs}, v, input);
    CallState& state = begin_call(ctrl);
    if (state.poisoned) {
        mark_failed(a, one_shot_outputs(a, !REDUCE), first, stride);
        return;
    }
    save_push_state(ctrl, state, a.bytes);
    // Block 0 tells every peer what it calls before its data goes out; every
    // block with work checks what they call (its handshake lanes).
    const bool has_work = block_has_work<W>(a, packs);
    const u32 shake = lamport_handshake_peer<W>(a, has_work);
    if (shake != CT_NO_PEER && blockIdx.x == 0u) handshake_send(a, shake, state.calls);
    // This call's push buffer and the previous call's, which step 2 re-arms,
    // worked out before the pushes (see rearm_previous).
    const u32 phase = state.push_phase;
    const u32 rearm = previous_buffer(phase);
    const u64 buffer = (u64)phase * World<W>::size(a) * a.slot_bytes;
    const u64 my_slot = buffer + (u64)a.rank * a.slot_bytes;
    if (lamport_idle(state, rearm, first, packs, shake)) return;

    // 1. Push this rank's data into slot `rank` of buffer `phase` of every peer.
    for (u64 base = first; base < packs; base += stride * UNROLL) {
        const Step s{base, stride, packs};
        if (base != first) load_step(s, v, input);
        use_step(s, v, [&](u64 i, const Pack& p) {
            for_peers<W>(a, [&](u32 q) { lamport_push((char*)a.push_bufs[q] + my_slot + i * 16u, p); });
        });
    }
    // 2. Re-arm the previous call's buffer while the pushes cross the link
    //    (they are posted stores), so the local writes overlap the transfer.
    rearm_previous<W>(a, state, rearm, first, stride);

    // 3. Receive: the same thread handles the same packs as in step 1. The
    //    block's handshake lanes check the peers' calls before any wait for
    //    data (a peer making another call, another size say, might never send
    //    the packs waited for); every thread reads their verdict at the
    //    block's end, and marks its packs if a peer made another call.
    bool agreed = true;  // a lane's verdict on its peer's call
    if (shake != CT_NO_PEER)
        agreed = handshake_check(a, shake, state.calls, CT_KERNEL_ONE_SHOT_PUSH, handshake_peek(a, shake));
    bool ok = agreed;
    const char* mine = (const char*)a.push_bufs[a.rank] + buffer;
    auto slot = [&](u32 p, u64 i) { return mine + (u64)p * a.slot_bytes + i * 16u; };
    for (u64 base = first; ok && base < packs; base += stride * UNROLL)
        ok = receive_step<W, UNROLL, true>(a, Step{base, stride, packs}, CT_KERNEL_ONE_SHOT_PUSH, input, slot,
                                           [&](u64 i, const Pack (&r)[World<W>::SLOTS]) {
                                               store_result<W, E, REDUCE>(a, i, r);
                                           });
    ok = block_verdict(agreed) && ok;
    if (!ok) mark_failed(a, one_shot_outputs(a, !REDUCE), first, stride);
}

CT_KERNEL colltune_one_shot_push_all_reduce_bf16(const CollArgs a) { one_shot_push<kWorld, Bf16, true>(a); }
CT_KERNEL colltune_one_shot_push_all_reduce_f16(const CollArgs a) { one_shot_push<kWorld, F16, true>(a); }
CT_KERNEL colltune_one_shot_push_all_reduce_f32(const CollArgs a) { one_shot_push<kWorld, F32, true>(a); }
// All-gather moves bits, so one kernel serves every dtype.
CT_KERNEL colltune_one_shot_push_all_gather(const CollArgs a) { one_shot_push<kWorld, F32, false>(a); }

// The fused all-reduce + add + RMSNorm, one-shot: the same Lamport exchange
// (every rank's partial sums pushed into every peer's slot of buffer k%3,
// sentinel words sent as 0, the previous buffer re-armed meanwhile), with rows
// as the unit of work (prims.cu, "Rows"): each thread pushes, then receives,
// its packs of its rows, adds its own residual to every rank's sum (x, the new
// residual) and, once its block has every pack of its rows, stores the row's
// RMSNorm times the weight. Every rank sums every row itself, in the same
// order, from the same bits: all ranks hold the same x and output (given the
// same residual and weight). A world of one pushes nothing: add + RMSNorm.
template <int W, typename E>
__device__ __forceinline__ void one_shot_push_add_rmsnorm(const CollArgs& a) {
    dependent_launch_prologue();
    u32* const ctrl = ctrl_of(a, a.rank);
    const bool aligned = a.io_aligned != 0u;
    const char* in = (const char*)a.input;
    const char* res = (const char*)a.residual;
    auto input = [&](u64 i) { return without_sentinel(ld_io(in + i * 16u, aligned)); };
    const Rows r = rows_of<E>(a);
    CallState& state = begin_call(ctrl);
    if (state.poisoned) {
        mark_failed_rows<E>(a);
        return;
    }
    save_push_state(ctrl, state, a.bytes);
    const u32 shake = lamport_handshake_peer<W>(a, r.block_has_work());
    if (shake != CT_NO_PEER && blockIdx.x == 0u) handshake_send(a, shake, state.calls);
    const u32 phase = state.push_phase;
    const u32 rearm = previous_buffer(phase);
    const u64 buffer = (u64)phase * World<W>::size(a) * a.slot_bytes;
    const u64 my_slot = buffer + (u64)a.rank * a.slot_bytes;

    // 1. Push this rank's packs of the thread's rows into every peer.
    {
        for (u64 first = r.first(); first < r.rows; first += r.step()) {
            if (!r.has(first)) break;
            const u64 base = r.row(first) * r.row_packs;
            for (u32 p = r.lane(); p < r.row_packs; p += r.group) {
                const Pack v = input(base + p);
                for_peers<W>(a, [&](u32 q) { lamport_push((char*)a.push_bufs[q] + my_slot + (base + p) * 16u, v); });
            }
        }
    }
    // 2. Re-arm the previous call's buffer while the pushes cross the link.
    rearm_previous<W>(a, state, rearm, (u64)blockIdx.x * blockDim.x + threadIdx.x, thread_stride());

    // 3. Receive and normalise. The handshake lanes check the peers' calls
    //    before any wait for data; every thread reads their verdict at the
    //    block's end, and marks its rows if a peer made another call.
    bool ok = true;
    if (shake != CT_NO_PEER)
        ok = handshake_check(a, shake, state.calls, CT_KERNEL_ONE_SHOT_PUSH, handshake_peek(a, shake));
    const char* mine = (const char*)a.push_bufs[a.rank] + buffer;
    auto slot = [&](u32 p, u64 i) { return mine + (u64)p * a.slot_bytes + i * 16u; };
    // A lane's verdict enters norm_rows' first barrier (__syncthreads_and),
    // before any output of the block's rows is stored: that barrier is the
    // block's verdict, so the block's end needs no barrier of its own.
    ok = norm_rows<E, 1, false>(a, ok, true, [&](u64 i, Pack& x) {
        const Pack residual = ld_io(res + i * 16u, aligned);
        return receive_step<W, 1, true>(a, Step{i, 1u, i + 1u}, CT_KERNEL_ONE_SHOT_PUSH, input, slot,
                                        [&](u64, const Pack (&v)[World<W>::SLOTS]) {
                                            x = add_residual<E, World<W>::SLOTS>(v, World<W>::size(a), residual);
                                        });
    });
    if (!ok) mark_failed_rows<E>(a);
}

CT_KERNEL_ONE_BLOCK colltune_one_shot_push_all_reduce_add_rmsnorm_bf16(const CollArgs a) {
    one_shot_push_add_rmsnorm<kWorld, Bf16>(a);
}
CT_KERNEL_ONE_BLOCK colltune_one_shot_push_all_reduce_add_rmsnorm_f16(const CollArgs a) {
    one_shot_push_add_rmsnorm<kWorld, F16>(a);
}
CT_KERNEL_ONE_BLOCK colltune_one_shot_push_all_reduce_add_rmsnorm_f32(const CollArgs a) {
    one_shot_push_add_rmsnorm<kWorld, F32>(a);
}
