// The loopback reference collective: the stand-in for NCCL in a loopback
// world (NCCL refuses two ranks on one GPU), which also runs the calls a
// custom kernel declines there. Element granular so it takes any size, and
// chunked through the staging halves so it takes any length. It shares the
// pull family's staging halves and counters (see one_shot_pull.cu for why a
// half can be reused without an end-of-call barrier).
//
// Chunk c uses half (use + c) & 1 and
// barrier value seq + c + 1, with the ownership rule above (element j of a chunk
// belongs to thread j mod stride in every chunk). All-gather moves 16-bit units,
// which every dtype is a multiple of. Correctness matters here, not speed: one
// generic body serves every world size.
// ---------------------------------------------------------------------------

__device__ __forceinline__ u16 ld_stage_bits(const u16* p) { return ld_u16_sys(p); }
__device__ __forceinline__ u32 ld_stage_bits(const u32* p) { return ld_u32_sys(p); }

// Marks the output of this thread's elements of every chunk (all-ones bits),
// the reference kernel's layout of prims.cu's mark_failed.
template <typename Bits, bool REDUCE>
__device__ __noinline__ void mark_failed_elements(Bits* out, u64 units, u64 chunk_units, u32 world, u64 first,
                                                  u64 stride) {
    for (u64 base = 0; base < units; base += chunk_units) {
        const u64 len = (units - base < chunk_units) ? units - base : chunk_units;
        for (u64 j = first; j < len; j += stride) {
            if (REDUCE) {
                out[base + j] = (Bits)~(Bits)0;
            } else {
                for (u32 p = 0; p < world; ++p) out[(u64)p * units + base + j] = (Bits)~(Bits)0;
            }
        }
    }
}

template <typename E, bool REDUCE>
__device__ __forceinline__ void reference_collective(const CollArgs& a) {
    dependent_launch_prologue();
    typedef typename E::Bits Bits;
    const u64 unit = sizeof(Bits);
    u32* ctrl = ctrl_of(a, a.rank);
    const u64 first = first_unit<0>(a);
    const u64 stride = thread_stride();
    const u32 world = a.world;
    const u64 units = a.bytes / unit;
    const u64 chunk_units = a.staging_bytes / unit;
    const CallState& state = begin_call(ctrl);
    if (state.poisoned) {
        mark_failed_elements<Bits, REDUCE>((Bits*)a.output, units, chunk_units, world, first, stride);
        return;
    }

    const u64 chunks = (units + chunk_units - 1u) / chunk_units;
    const char* in = (const char*)a.input;
    char* out = (char*)a.output;
    save_pull_state(ctrl, state, chunks, chunks);

    for (u64 c = 0; c < chunks; ++c) {
        const u64 half = ((state.use + c) & 1u) * a.staging_bytes;
        const u64 base = c * chunk_units;
        const u64 len = (units - base < chunk_units) ? units - base : chunk_units;

        char* my_stage = (char*)a.staging[a.rank] + half;
        for (u64 j = first; j < len; j += stride)
            *(Bits*)(my_stage + j * unit) = *(const Bits*)(in + (base + j) * unit);

        if (!block_has_work<0>(a, len)) continue;
        // The first chunk carries the call handshake.
        if (!block_barrier<0>(a, state.seq + c + 1u, CT_KERNEL_REFERENCE, CT_PHASE_BARRIER_1, c == 0,
                              state.calls)) {
            mark_failed_elements<Bits, REDUCE>((Bits*)out, units, chunk_units, world, first, stride);
            break;
        }

        for (u64 j = first; j < len; j += stride) {
            if (REDUCE) {
                float sum = E::to_f32(ld_stage_bits((const Bits*)((const char*)a.staging[0] + half + j * unit)));
                for (u32 p = 1; p < world; ++p)
                    sum += E::to_f32(ld_stage_bits((const Bits*)((const char*)a.staging[p] + half + j * unit)));
                *(Bits*)(out + (base + j) * unit) = E::from_f32(sum);
            } else {
                for (u32 p = 0; p < world; ++p) {
                    const Bits v = ld_stage_bits((const Bits*)((const char*)a.staging[p] + half + j * unit));
                    *(Bits*)(out + ((u64)p * units + base + j) * unit) = v;
                }
            }
        }
    }

}

CT_KERNEL colltune_reference_all_reduce_bf16(const CollArgs a) { reference_collective<Bf16, true>(a); }
CT_KERNEL colltune_reference_all_reduce_f16(const CollArgs a) { reference_collective<F16, true>(a); }
CT_KERNEL colltune_reference_all_reduce_f32(const CollArgs a) { reference_collective<F32, true>(a); }
CT_KERNEL colltune_reference_all_gather(const CollArgs a) { reference_collective<Bf16, false>(a); }
