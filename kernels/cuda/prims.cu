// The primitives every algorithm is written with (the algorithms are in
// push.cu, pull.cu and two_shot.cu):
// - world-size specialisation and the per-thread unroll;
// - the call state a kernel reads from its rank's control block, and the
//   end-of-call hand-over of the counters;
// - a reduction of W packs in rank order;
// - the Lamport slot: push, bounded poll, re-arm;
// - the per-block barrier over peers (a semaphore of 64-bit flags).

// ---------------------------------------------------------------------------
// World-size specialisation
// ---------------------------------------------------------------------------

// Every algorithm is a template on W, the world size. The host compiles the
// sources once per world size it runs (NVRTC, `-D CT_WORLD=W` for worlds of
// 2..8) and CT_WORLD = 0 for the generic path, where the world size comes from
// the arguments and loops are bounded by CT_MAX_WORLD (a world of one uses it).
// With W known the loops over ranks unroll, and all ranks' packs of a step are
// loaded into registers before any is used, so W loads are in flight at once.
template <int W>
struct World {
    // Bound of per-rank arrays.
    static const int SLOTS = W > 0 ? W : CT_MAX_WORLD;
    // Packs a thread takes per step from each rank: about 8 packs (128 bytes)
    // in flight per thread in all, within the 128 registers of a 512-thread block.
    static const int UNROLL = SLOTS <= 2 ? 4 : (SLOTS <= 4 ? 2 : 1);
    __device__ static __forceinline__ u32 size(const CollArgs& a) { return W > 0 ? (u32)W : a.world; }
};

// The world size this module was compiled for (0: generic). The host launches
// a module only for worlds of that size (KernelSet checks it).
#ifndef CT_WORLD
#error "CT_WORLD must be defined (0 for the generic path, else the world size)"
#endif
constexpr int kWorld = CT_WORLD;

// ---------------------------------------------------------------------------
// Call state
// ---------------------------------------------------------------------------

// What a kernel needs from its rank's control block before it starts. Thread 0
// issues the loads together (one memory latency, not one per word) and
// broadcasts them through shared memory, so every thread of the block takes the
// same branches and no barrier is left half-entered.
struct CallState {
    u32 poisoned;       // an earlier call of this rank timed out
    u32 push_phase;     // push buffer of this call, 0..2
    u32 push_used[3];   // bytes per slot the last call through each push buffer used
    u64 seq;            // last barrier value of the pull family
    u64 use;            // staging uses so far

    // push_used[buffer] without a run-time array index (which would put the
    // array in local memory).
    __device__ __forceinline__ u32 used_bytes(u32 buffer) const {
        return buffer == 0u ? push_used[0] : (buffer == 1u ? push_used[1] : push_used[2]);
    }
};

__device__ __forceinline__ CallState begin_call(u32* ctrl) {
    __shared__ CallState s;
    if (threadIdx.x == 0) {
        const volatile u32* c = ctrl;
        s.poisoned = c[CT_CTRL_ERROR];
        s.push_phase = c[CT_CTRL_PUSH_PHASE];
        s.push_used[0] = c[CT_CTRL_PUSH_USED + 0];
        s.push_used[1] = c[CT_CTRL_PUSH_USED + 1];
        s.push_used[2] = c[CT_CTRL_PUSH_USED + 2];
        s.seq = *(const volatile u64*)ctrl_u64(ctrl, CT_CTRL_PULL_SEQ);
        s.use = *(const volatile u64*)ctrl_u64(ctrl, CT_CTRL_PULL_USE);
    }
    __syncthreads();
    return s;
}

// End of a call: every block arrives on `done`; the last one resets it and
// returns true in all its threads, so it alone advances the rank's counters.
//
// No fence before the arrival: the one thing the last block must not overtake
// is the other blocks' reads of the counters in begin_call, and a block arrives
// only after it has used those values (the loads have returned). The next call
// on this rank starts after this kernel has finished (stream order), so every
// block of it sees the new values.
__device__ __forceinline__ bool end_call(u32* done) {
    __shared__ u32 s_last;
    __syncthreads();
    if (threadIdx.x == 0) {
        const u32 previous = atomicAdd(done, 1u);
        s_last = (previous == gridDim.x - 1) ? 1u : 0u;
        if (s_last) *done = 0u;
    }
    __syncthreads();
    return s_last != 0u;
}

// ---------------------------------------------------------------------------
// Reduction
// ---------------------------------------------------------------------------

// The sum of v[0..world) in rank order, in f32, rounded once.
template <typename E, int SLOTS>
__device__ __forceinline__ Pack reduce_ranks(const Pack (&v)[SLOTS], u32 world) {
    PackAcc<E> acc;
    acc.first(v[0]);
#pragma unroll
    for (int p = 1; p < SLOTS; ++p)
        if ((u32)p < world) acc.add(v[p]);
    return acc.result();
}

// ---------------------------------------------------------------------------
// Lamport slot
// ---------------------------------------------------------------------------

// Writes one pack of data into a peer's armed slot. The value must already be
// free of the sentinel word (without_sentinel).
__device__ __forceinline__ void lamport_push(char* dst, const Pack& v) { st_pack_sys(dst, v); }

// Polls `src` until no 32-bit word of `v` is the sentinel. `v` holds the first
// read already (issued with the other packs of the step, so they were all in
// flight together). False after reporting a timeout.
__device__ __forceinline__ bool lamport_wait(Pack& v, const char* src, Deadline& deadline, u32* ctrl, u32 peer) {
    while (has_sentinel(v)) {
        if (deadline.expired()) {
            report_timeout(ctrl, CT_KERNEL_PUSH, CT_PHASE_DATA, peer);
            return false;
        }
        v = ld_pack_sys(src);
    }
    return true;
}

// Arms `packs` packs of a slot again (this thread's share, grid-stride).
__device__ __forceinline__ void lamport_rearm(char* slot, u64 packs, u64 first, u64 stride) {
    const Pack armed = sentinel_pack();
    for (u64 i = first; i < packs; i += stride) st_pack(slot + i * 16u, armed);
}

// ---------------------------------------------------------------------------
// Barrier over peers
// ---------------------------------------------------------------------------

// Rank r's flag written by rank `source` for block `block`.
__device__ __forceinline__ u64* barrier_flag(const CollArgs& a, u32 owner, u32 block, u32 source) {
    return ctrl_u64(ctrl_of(a, owner), CT_CTRL_FLAGS) + (u64)block * CT_MAX_WORLD + source;
}

// Barrier between block `blockIdx.x` of this rank and the same block of every
// rank (itself included). Thread t < world signals rank t and waits for rank t.
//
// Ordering: __syncthreads() orders every access of this block before thread t's
// release store at system scope (release is cumulative over what the barrier
// ordered before it), so a peer that acquires the flag sees this block's writes,
// to its memory or ours. No extra fence. The wait spins on relaxed loads and
// acquires once when the value has arrived (that load reads the same or a later
// release by the same peer thread, so it synchronises with it); the closing
// __syncthreads_and() extends the acquire to every thread of the block.
//
// Flag values come from a 64-bit counter that only increases, so flags are never
// reset and a fast peer that already signalled a later barrier still satisfies
// this one (flag_reached). Returns false in every thread of the block if any
// wait timed out.
template <int W>
__device__ __forceinline__ bool block_barrier(const CollArgs& a, u64 value, u32 kernel, u32 phase) {
    __syncthreads();
    bool ok = true;
    const u32 t = threadIdx.x;
    if (t < World<W>::size(a)) {
        st_u64_release_sys(barrier_flag(a, t, blockIdx.x, a.rank), value);
        const u64* mine = barrier_flag(a, a.rank, blockIdx.x, t);
        if (!flag_reached(ld_u64_relaxed_sys(mine), value)) {
            Deadline deadline(a.timeout_ns);
            while (!flag_reached(ld_u64_relaxed_sys(mine), value)) {
                if (deadline.expired()) {
                    report_timeout(ctrl_of(a, a.rank), kernel, phase, t);
                    ok = false;
                    break;
                }
            }
        }
        if (ok) (void)ld_u64_acquire_sys(mine);
    }
    return __syncthreads_and(ok) != 0;
}
