// one_shot_push: Lamport-style all-reduce and all-gather. No barrier at all: the
// arrival of the data is the synchronisation.
//
// Each rank owns a push region of 3 buffers; buffer b holds `world` slots of
// `slot_bytes`, slot p receiving rank p's data. Every word of every buffer is
// armed with the sentinel before it is written. Call k (k = this rank's count of
// push calls, kept mod 3 in CT_CTRL_PUSH_PHASE so it never wraps badly):
//   1. writes this rank's input, sentinel words replaced by 0, into slot `rank`
//      of buffer k%3 on every rank (itself included), 16-byte relaxed.sys stores;
//   2. polls slot p of its own buffer k%3 for p = 0..W-1 until no 32-bit word of
//      a 16-byte vector is the sentinel, and reduces (f32, ranks in order) or
//      copies them to the output. Every word is its own "arrived" bit, so torn
//      16-byte stores cannot be mistaken for complete ones;
//   3. re-arms its own buffer (k+2)%3, i.e. the buffer of call k-1, for as many
//      bytes per slot as call k-1 used (recorded in CT_CTRL_PUSH_USED).
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
// The next call reads CT_CTRL_PUSH_PHASE/USED written by the last block of this
// one; stream order makes that safe and keeps CUDA-graph replays host-free.

template <typename E, bool REDUCE>
__device__ __forceinline__ void push_collective(const CollArgs& a) {
    u32* ctrl = ctrl_of(a, a.rank);
    if (rank_is_poisoned(ctrl)) return;

    const u32 phase = ctrl[CT_CTRL_PUSH_PHASE];
    const u32 rearm = (phase + 2u) % 3u;
    const u32 world = a.world;
    const u64 packs = a.bytes / 16u;
    const u64 buffer_bytes = (u64)world * a.slot_bytes;
    const u64 first = first_thread();
    const u64 stride = thread_stride();
    const bool aligned = a.io_aligned != 0u;
    const char* in = (const char*)a.input;
    char* out = (char*)a.output;

    // 1. Push this rank's data into slot `rank` of buffer `phase` everywhere.
    const u64 my_slot = (u64)phase * buffer_bytes + (u64)a.rank * a.slot_bytes;
    for (u64 i = first; i < packs; i += stride) {
        const Pack v = without_sentinel(ld_io(in + i * 16u, aligned));
        for (u32 p = 0; p < world; ++p) st_pack_sys((char*)a.push_bufs[p] + my_slot + i * 16u, v);
    }

    // 2. Receive: the same thread handles the same vectors as in step 1, which
    //    makes in-place calls safe (its input is read before its output is written).
    const char* mine = (const char*)a.push_bufs[a.rank] + (u64)phase * buffer_bytes;
    bool ok = true;
    for (u64 i = first; ok && i < packs; i += stride) {
        PackAcc<E> acc;
        for (u32 p = 0; p < world; ++p) {
            const char* src = mine + (u64)p * a.slot_bytes + i * 16u;
            Pack v = ld_pack_sys(src);
            if (has_sentinel(v)) {
                Deadline deadline(a.timeout_ns);
                do {
                    if (deadline.expired()) {
                        report_timeout(ctrl, CT_KERNEL_PUSH, CT_PHASE_DATA, p);
                        ok = false;
                        break;
                    }
                    v = ld_pack_sys(src);
                } while (has_sentinel(v));
                if (!ok) break;
            }
            if (REDUCE) {
                if (p == 0)
                    acc.first(v);
                else
                    acc.add(v);
            } else {
                st_io(out + (u64)p * a.bytes + i * 16u, v, aligned);
            }
        }
        if (REDUCE && ok) st_io(out + i * 16u, acc.result(), aligned);
    }

    // 3. Re-arm the buffer of the previous call, only as far as it was used.
    const u64 used_packs = (u64)ctrl[CT_CTRL_PUSH_USED + rearm] / 16u;
    char* stale = (char*)a.push_bufs[a.rank] + (u64)rearm * buffer_bytes;
    const Pack armed = sentinel_pack();
    for (u32 p = 0; p < world; ++p)
        for (u64 i = first; i < used_packs; i += stride) st_pack(stale + (u64)p * a.slot_bytes + i * 16u, armed);

    // 4. Advance to the next buffer.
    if (is_last_block(ctrl + CT_CTRL_PUSH_DONE) && threadIdx.x == 0) {
        ctrl[CT_CTRL_PUSH_USED + phase] = (u32)a.bytes;
        ctrl[CT_CTRL_PUSH_PHASE] = (phase + 1u) % 3u;
    }
}

CT_KERNEL colltune_push_all_reduce_bf16(const CollArgs a) { push_collective<Bf16, true>(a); }
CT_KERNEL colltune_push_all_reduce_f16(const CollArgs a) { push_collective<F16, true>(a); }
CT_KERNEL colltune_push_all_reduce_f32(const CollArgs a) { push_collective<F32, true>(a); }
// All-gather moves bits, so one kernel serves every dtype.
CT_KERNEL colltune_push_all_gather(const CollArgs a) { push_collective<F32, false>(a); }
