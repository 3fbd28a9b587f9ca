// one_shot_pull (all-reduce, all-gather) and the loopback reference collective.
//
// Each rank owns a staging region of two halves of `staging_bytes`. A call moves
// its message in chunks of at most one half (the custom algorithm is only given
// messages that fit one chunk; the loopback reference takes any size):
//   1. every block copies its part of this rank's chunk into staging half h;
//   2. block barrier with the same block of every rank (flags, release/acquire
//      at system scope);
//   3. every block reads the SAME part of every rank's half h and reduces it
//      (f32, ranks in order 0..W-1) or copies it into the output.
// A unit (16-byte pack, or one element for the reference) is owned by the block
// of thread (j mod stride), where j is the unit's index within its chunk. The
// copy in step 1 and the reads in step 3 use the same owner, so a per-block
// barrier is enough: block b only reads what blocks b of all ranks wrote.
//
// No barrier at the end: half h is written again two chunks later (in this call
// or a later one: CT_CTRL_PULL_USE counts uses and picks the half). Before block
// b of this rank writes half h again it has passed the barrier of the chunk in
// between, which needs block b of every peer to signal it; a peer's block b
// signals only after all its threads finished reading the chunk before (the
// barrier starts with __syncthreads). Ownership does not depend on the chunk or
// the call, so block b of this rank only overwrites what blocks b read. When the
// grid differs between calls, kernel order settles it: a rank starts a new call
// only after its previous kernel ended, which needed every peer to have entered
// that previous call, so every peer had finished the call before it.
//
// Barrier values come from CT_CTRL_PULL_SEQ, a per-rank counter shared by every
// pull-family kernel (one_shot_pull, two_shot_pull, reference): all ranks run the
// same sequence of calls, so they agree on it without talking.

// A unit of 16 bytes: the custom kernels.
template <typename E>
struct PackUnit {
    static const u32 BYTES = 16;
    typedef Pack Value;
    typedef PackAcc<E> Acc;
    __device__ static __forceinline__ Value load_io(const char* p, bool aligned) { return ld_io(p, aligned); }
    __device__ static __forceinline__ void store_io(char* p, const Value& v, bool aligned) { st_io(p, v, aligned); }
    __device__ static __forceinline__ void store_stage(char* p, const Value& v) { st_pack(p, v); }
    __device__ static __forceinline__ Value load_stage(const char* p) { return ld_pack_sys(p); }
};

// f32 accumulator of one element.
template <typename E>
struct ElemAcc {
    float f;
    __device__ __forceinline__ void first(typename E::Bits v) { f = E::to_f32(v); }
    __device__ __forceinline__ void add(typename E::Bits v) { f += E::to_f32(v); }
    __device__ __forceinline__ typename E::Bits result() const { return E::from_f32(f); }
};

__device__ __forceinline__ u16 ld_stage_bits(const u16* p) { return ld_u16_sys(p); }
__device__ __forceinline__ u32 ld_stage_bits(const u32* p) { return ld_u32_sys(p); }

// A unit of one element: the loopback reference, which must take any size.
template <typename E>
struct ElemUnit {
    typedef typename E::Bits Value;
    static const u32 BYTES = sizeof(Value);
    typedef ElemAcc<E> Acc;
    __device__ static __forceinline__ Value load_io(const char* p, bool) { return *(const Value*)p; }
    __device__ static __forceinline__ void store_io(char* p, const Value& v, bool) { *(Value*)p = v; }
    __device__ static __forceinline__ void store_stage(char* p, const Value& v) { *(Value*)p = v; }
    __device__ static __forceinline__ Value load_stage(const char* p) { return ld_stage_bits((const Value*)p); }
};

template <typename U, bool REDUCE>
__device__ __forceinline__ void pull_collective(const CollArgs& a, u32 kernel) {
    u32* ctrl = ctrl_of(a, a.rank);
    if (rank_is_poisoned(ctrl)) return;

    const u32 seq0 = ctrl[CT_CTRL_PULL_SEQ];
    const u32 use0 = ctrl[CT_CTRL_PULL_USE];
    const u32 world = a.world;
    const u64 units = a.bytes / U::BYTES;
    const u64 chunk_units = a.staging_bytes / U::BYTES;
    const u64 chunks = (units + chunk_units - 1u) / chunk_units;
    const u64 first = first_thread();
    const u64 stride = thread_stride();
    const bool aligned = a.io_aligned != 0u;
    const char* in = (const char*)a.input;
    char* out = (char*)a.output;

    for (u64 c = 0; c < chunks; ++c) {
        const u64 half = (u64)((use0 + (u32)c) & 1u) * a.staging_bytes;
        const u64 base = c * chunk_units;
        const u64 len = (units - base < chunk_units) ? units - base : chunk_units;

        char* my_stage = (char*)a.staging[a.rank] + half;
        for (u64 j = first; j < len; j += stride)
            U::store_stage(my_stage + j * U::BYTES, U::load_io(in + (base + j) * U::BYTES, aligned));

        if (!block_barrier(a, seq0 + (u32)c + 1u, kernel, CT_PHASE_BARRIER_1)) break;

        for (u64 j = first; j < len; j += stride) {
            if (REDUCE) {
                typename U::Acc acc;
                acc.first(U::load_stage((const char*)a.staging[0] + half + j * U::BYTES));
                for (u32 p = 1; p < world; ++p)
                    acc.add(U::load_stage((const char*)a.staging[p] + half + j * U::BYTES));
                U::store_io(out + (base + j) * U::BYTES, acc.result(), aligned);
            } else {
                for (u32 p = 0; p < world; ++p) {
                    const typename U::Value v = U::load_stage((const char*)a.staging[p] + half + j * U::BYTES);
                    U::store_io(out + ((u64)p * units + base + j) * U::BYTES, v, aligned);
                }
            }
        }
    }

    if (is_last_block(ctrl + CT_CTRL_PULL_DONE) && threadIdx.x == 0) {
        ctrl[CT_CTRL_PULL_SEQ] = seq0 + (u32)chunks;
        ctrl[CT_CTRL_PULL_USE] = use0 + (u32)chunks;
    }
}

CT_KERNEL colltune_pull_all_reduce_bf16(const CollArgs a) { pull_collective<PackUnit<Bf16>, true>(a, CT_KERNEL_PULL); }
CT_KERNEL colltune_pull_all_reduce_f16(const CollArgs a) { pull_collective<PackUnit<F16>, true>(a, CT_KERNEL_PULL); }
CT_KERNEL colltune_pull_all_reduce_f32(const CollArgs a) { pull_collective<PackUnit<F32>, true>(a, CT_KERNEL_PULL); }
CT_KERNEL colltune_pull_all_gather(const CollArgs a) { pull_collective<PackUnit<F32>, false>(a, CT_KERNEL_PULL); }

// The loopback stand-in for NCCL (a loopback world has no NCCL: it refuses two
// ranks on one GPU). Element granular so it takes any size, chunked so it takes
// any length; all-gather moves 16-bit units, which every dtype is a multiple of.
CT_KERNEL colltune_reference_all_reduce_bf16(const CollArgs a) { pull_collective<ElemUnit<Bf16>, true>(a, CT_KERNEL_REFERENCE); }
CT_KERNEL colltune_reference_all_reduce_f16(const CollArgs a) { pull_collective<ElemUnit<F16>, true>(a, CT_KERNEL_REFERENCE); }
CT_KERNEL colltune_reference_all_reduce_f32(const CollArgs a) { pull_collective<ElemUnit<F32>, true>(a, CT_KERNEL_REFERENCE); }
CT_KERNEL colltune_reference_all_gather(const CollArgs a) { pull_collective<ElemUnit<Bf16>, false>(a, CT_KERNEL_REFERENCE); }
