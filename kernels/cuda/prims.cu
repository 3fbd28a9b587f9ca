// The primitives every algorithm is written with (each algorithm is in a file
// of its own name: one_shot_push.cu, one_shot_pull.cu, two_shot_pull.cu,
// two_shot_push.cu, and the loopback stand-in for NCCL in reference.cu):
// - world-size specialisation and the per-thread unroll;
// - the call state a kernel reads from its rank's control block, and the
//   end-of-call hand-over of the counters;
// - the marking of outputs of failed calls;
// - which thread takes which unit;
// - a reduction of W packs in rank order;
// - the Lamport slot: push, bounded poll, re-arm;
// - ranks, peers, the result of a unit, the re-arm of the previous buffer;
// - the steps every kernel is made of: load every rank's packs of a step at
//   once, wait for the Lamport ones, use them;
// - the call handshake;
// - the per-block barrier over peers (a semaphore of 64-bit flags);
// - rows: the fused all-reduce + add + RMSNorm's unit of work, a row per
//   group of threads, its norm, and the marking of both its outputs.

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
    // Packs a thread takes per step from each rank: one in a world of two,
    // whose blocks of 1024 threads (CT_MAX_THREADS, 64 registers each) keep
    // enough in flight that way; two in worlds of 3 and 4 and one above, so
    // that a thread of a block of 512 holds W - 1 to 2 (W - 1) packs of its
    // peers at once (the launch-shape A/B behind this is in kernels/GPU.md).
    static const int UNROLL = SLOTS <= 2 ? 1 : (SLOTS <= 4 ? 2 : 1);
    __device__ static __forceinline__ u32 size(const CollArgs& a) { return W > 0 ? (u32)W : a.world; }
};

// The world size this module was compiled for (0: generic). The host launches
// a module only for worlds of that size (KernelSet checks it).
#ifndef CT_WORLD
#error "CT_WORLD must be defined (0 for the generic path, else the world size)"
#endif
constexpr int kWorld = CT_WORLD;

// ---------------------------------------------------------------------------
// Programmatic dependent launch
// ---------------------------------------------------------------------------

// The first statement of every kernel. The host may launch a kernel with
// programmatic dependent launch (sm_90+, Options::programmatic_launch): it is
// then scheduled while the kernel before it in the stream is still finishing,
// and griddepcontrol.wait holds it until that kernel has completed and its
// memory operations are visible. So nothing may touch memory before the wait:
// not the input (the previous kernel may be what writes it), not a peer's or
// this rank's control block. launch_dependents then lets the next kernel's
// blocks be scheduled as this kernel's blocks exit (they wait the same way).
// Both are no-ops for a kernel launched without the attribute.
__device__ __forceinline__ void dependent_launch_prologue() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------
// Call state
// ---------------------------------------------------------------------------

// What a block needs from its rank's control block before it starts. Every
// block keeps its own copy of the rank's call state (CT_CTRL_STATE + block *
// CT_CTRL_STATE_WORDS), so no block ever waits for another block of its own
// kernel and nothing is handed over at the end: thread 0 loads the error word
// and the block's state together (one memory latency), broadcasts them through
// shared memory (so every thread takes the same branches and no barrier is left
// half-entered), and writes the next state at once (save_*_state; the next call
// on this rank starts after this kernel has finished, in stream order). This
// needs every kernel of a rank to launch the same grid, so that block b sees
// every call (the host does: LaunchShape::grid).
struct CallState {
    u32 poisoned;       // an earlier call of this rank failed
    u32 calls;          // calls of this rank before this one (block 0's count is the handshake's)
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

__device__ __forceinline__ u32* block_state(u32* ctrl) {
    return ctrl + CT_CTRL_STATE + blockIdx.x * CT_CTRL_STATE_WORDS;
}

// Returns the block's shared copy, so that the state's fields are read from
// shared memory where they are used instead of being held in registers for the
// whole kernel.
__device__ __forceinline__ CallState& begin_call(u32* ctrl) {
    __shared__ CallState s;
    if (threadIdx.x == 0) {
        const u32* state = block_state(ctrl);
        const u32 poisoned = ld_u32_sys(ctrl + CT_CTRL_ERROR);
        const Pack low = ld_pack_sys(state);
        const Pack high = ld_pack_sys(state + 4);
        const u32 phase_word = low.w[CT_STATE_PUSH_PHASE];
        s.poisoned = poisoned;
        s.push_phase = phase_word & CT_STATE_PHASE_MASK;
        s.calls = phase_word >> CT_STATE_CALLS_SHIFT;
        s.push_used[0] = low.w[CT_STATE_PUSH_USED + 0];
        s.push_used[1] = low.w[CT_STATE_PUSH_USED + 1];
        s.push_used[2] = low.w[CT_STATE_PUSH_USED + 2];
        s.seq = (u64)high.w[CT_STATE_PULL_SEQ - 4] | ((u64)high.w[CT_STATE_PULL_SEQ - 3] << 32);
        s.use = (u64)high.w[CT_STATE_PULL_USE - 4] | ((u64)high.w[CT_STATE_PULL_USE - 3] << 32);
    }
    __syncthreads();
    return s;
}

// The state word that holds the call count and the push phase.
__device__ __forceinline__ u32 phase_word(u32 calls, u32 phase) { return (calls << CT_STATE_CALLS_SHIFT) | phase; }

// The push state after a call of `bytes` per slot through buffer s.push_phase.
__device__ __forceinline__ void save_push_state(u32* ctrl, const CallState& s, u64 bytes) {
    if (threadIdx.x != 0) return;
    u32* state = block_state(ctrl);
    state[CT_STATE_PUSH_USED + s.push_phase] = (u32)bytes;
    state[CT_STATE_PUSH_PHASE] = phase_word(s.calls + 1u, (s.push_phase + 1u) % 3u);
}

// The pull-family state after a call that used `barriers` barrier values and
// `uses` staging uses.
__device__ __forceinline__ void save_pull_state(u32* ctrl, const CallState& s, u64 barriers, u64 uses) {
    if (threadIdx.x != 0) return;
    u32* state = block_state(ctrl);
    state[CT_STATE_PUSH_PHASE] = phase_word(s.calls + 1u, s.push_phase);
    *ctrl_u64(state, CT_STATE_PULL_SEQ) = s.seq + barriers;
    *ctrl_u64(state, CT_STATE_PULL_USE) = s.use + uses;
}

// ---------------------------------------------------------------------------
// Outputs of failed calls
// ---------------------------------------------------------------------------

// A failed call leaves no word of its output that looks like a result: the
// words it did not compute, and every word of a call that failed before its
// data could be trusted (a mismatched call, a peer that never arrived, a rank
// already poisoned), are set to all-ones bits, a NaN in every dtype. The host
// returns an error for every call it issues once it knows of the fault; this
// covers the calls that were already queued, and the failing call itself.
//
// Marking follows each kernel's own layout: a thread marks the output words of
// its own units (the words it would have stored), so the threads of a block
// together mark the block's whole share, and every thread of a grid together
// the whole output. A unit stands for `shares` output packs, pack
// s * share_packs + i of share s, those below total_packs:
// - one-shot all-reduce: one pack (shares 1);
// - one-shot all-gather: pack i of every rank's share (shares = world,
//   share_packs = the packs of one share);
// - two-shot: pack i of every shard (shares = world, share_packs = the shard).
// Packs are stored through st_io, so a view that is not 16-byte aligned is
// marked in 16-bit halves, all of it. Not inlined (the cold path), on scalars.
struct UnitOutputs {
    u64 units;        // units of the call (a thread takes first, first + stride, ...)
    u32 shares;       // output packs per unit
    u64 share_packs;  // distance between them, in packs
    u64 total_packs;  // packs of the whole output
};

__device__ __noinline__ void mark_failed_units(char* out, bool aligned, u64 first, u64 stride, u64 units,
                                               u32 shares, u64 share_packs, u64 total_packs) {
    Pack nan;
#pragma unroll
    for (int k = 0; k < 4; ++k) nan.w[k] = 0xffffffffu;
    for (u64 i = first; i < units; i += stride)
        for (u32 s = 0; s < shares; ++s) {
            const u64 pack = (u64)s * share_packs + i;
            if (pack < total_packs) st_io(out + pack * 16u, nan, aligned);
        }
}

__device__ __forceinline__ void mark_failed(const CollArgs& a, const UnitOutputs& u, u64 first, u64 stride) {
    mark_failed_units((char*)a.output, a.io_aligned != 0u, first, stride, u.units, u.shares, u.share_packs,
                      u.total_packs);
}

// The one-shot layout: unit i is pack i of the output, or of every share.
__device__ __forceinline__ UnitOutputs one_shot_outputs(const CollArgs& a, bool gather) {
    const u64 packs = a.bytes / 16u;
    return UnitOutputs{packs, gather ? a.world : 1u, packs, gather ? (u64)a.world * packs : packs};
}

// The two-shot layout: unit j is pack j of every shard.
__device__ __forceinline__ UnitOutputs two_shot_outputs(const CollArgs& a, u64 shard) {
    return UnitOutputs{shard, a.world, shard, a.bytes / 16u};
}

// ---------------------------------------------------------------------------
// Which thread takes which unit
// ---------------------------------------------------------------------------

// Unit j of a call (a pack; an element in the reference kernels) belongs to the
// thread numbered j mod thread_stride(), and every phase of a kernel keeps to
// it. Threads are numbered in one of two ways (protocol::sequence mirrors both
// and tests that each is a one-to-one numbering):
// - block by block: block b holds numbers [b * blockDim, (b + 1) * blockDim);
// - warps dealt to the blocks in turn: warp w of block b is warp w * gridDim + b,
//   so a message of a few warps' worth of units spreads over as many SMs
//   instead of filling one block first.
// A warp takes 32 consecutive units either way (512 contiguous bytes of packs).
// Dealing pays where a message holds a few warps' worth of units per block and
// costs where it holds less (only the first blocks have work either way) or
// fills every block (kernels/GPU.md, "Warp dealing", has the A/B), so the
// world-size-2 build (CT_DEAL_WORLD) deals calls of CT_DEAL_MIN_BYTES up to
// CT_DEAL_MAX_BYTES per rank; other calls, and other world sizes (not
// measured), number block by block. The choice depends only
// on the call's bytes, which every rank passes alike, so thread t of every
// rank takes the same units; it may change between calls, since a rank's
// kernel ends before its next one starts.
template <int W>
__device__ __forceinline__ bool deals_warps(const CollArgs& a) {
    return W == CT_DEAL_WORLD && a.bytes >= CT_DEAL_MIN_BYTES && a.bytes < CT_DEAL_MAX_BYTES;
}

// The number of this thread (its first unit).
template <int W>
__device__ __forceinline__ u64 first_unit(const CollArgs& a) {
    if (deals_warps<W>(a)) return ((u64)(threadIdx.x >> 5) * gridDim.x + blockIdx.x) * 32u + (threadIdx.x & 31u);
    return (u64)blockIdx.x * blockDim.x + threadIdx.x;
}

// Whether this block has any of `units` units: its lowest-numbered thread is
// below `units`. A block without work skips its barriers: its peers' same
// blocks have none either (every rank runs the same call on the same grid),
// and its flags simply lag (flag_reached accepts any later value).
template <int W>
__device__ __forceinline__ bool block_has_work(const CollArgs& a, u64 units) {
    const u64 lowest = deals_warps<W>(a) ? (u64)blockIdx.x * 32u : (u64)blockIdx.x * blockDim.x;
    return lowest < units;
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
// flight together). False once the wait must stop (Deadline::must_stop).
__device__ __forceinline__ bool lamport_wait(Pack& v, const char* src, Deadline& deadline, const CollArgs& a,
                                             u32 peer, u32 kernel) {
    while (has_sentinel(v)) {
        if (deadline.must_stop(a, kernel, CT_PHASE_DATA, peer)) return false;
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
// Ranks and peers
// ---------------------------------------------------------------------------

// f(p) for every rank p of the world (unrolled over the build's slots).
template <int W, typename F>
__device__ __forceinline__ void for_ranks(const CollArgs& a, F f) {
#pragma unroll
    for (int p = 0; p < World<W>::SLOTS; ++p)
        if ((u32)p < World<W>::size(a)) f((u32)p);
}

// f(p) for every rank p but this one.
template <int W, typename F>
__device__ __forceinline__ void for_peers(const CollArgs& a, F f) {
#pragma unroll
    for (int p = 0; p < World<W>::SLOTS; ++p)
        if ((u32)p < World<W>::size(a) && (u32)p != a.rank) f((u32)p);
}

// Stores one unit's result: the sum of every rank's pack in rank order at
// pack i of the output (REDUCE), or every rank's pack at pack i of its share
// of the gathered output.
template <int W, typename E, bool REDUCE>
__device__ __forceinline__ void store_result(const CollArgs& a, u64 i, const Pack (&v)[World<W>::SLOTS]) {
    char* out = (char*)a.output;
    const bool aligned = a.io_aligned != 0u;
    if (REDUCE) {
        st_io(out + i * 16u, reduce_ranks<E, World<W>::SLOTS>(v, World<W>::size(a)), aligned);
    } else {
        for_ranks<W>(a, [&](u32 p) { st_io(out + (u64)p * a.bytes + i * 16u, v[p], aligned); });
    }
}

// The push buffer the push-family call before this one used, for a call
// through buffer `phase` (calls take the three buffers in turn).
__device__ __forceinline__ u32 previous_buffer(u32 phase) { return (phase + 2u) % 3u; }

// Re-arms the peer slots of this rank's push buffer `rearm`, the one the
// push-family call before this one used (previous_buffer(state.push_phase)),
// as far as it used them (why nobody writes there meanwhile:
// one_shot_push.cu). Grid-stride over the packs, so the local stores overlap
// this call's transfers. The caller passes the buffer so that it can work it
// out before its pushes: read from the shared call state after them, the
// phase is loaded again (every push is an asm with a memory clobber), one
// shared-memory latency more before the re-arm stores and the receive step.
template <int W>
__device__ __forceinline__ void rearm_previous(const CollArgs& a, const CallState& state, u32 rearm, u64 first,
                                               u64 stride) {
    const u64 buffer_bytes = (u64)World<W>::size(a) * a.slot_bytes;
    const u64 used_packs = (u64)state.used_bytes(rearm) / 16u;
    char* stale = (char*)a.push_bufs[a.rank] + (u64)rearm * buffer_bytes;
    for_peers<W>(a, [&](u32 p) { lamport_rearm(stale + (u64)p * a.slot_bytes, used_packs, first, stride); });
}

// The block's verdict on every peer's call, read by every thread of the block
// at the end of its call (it is a barrier: every thread must reach it):
// `agreed` is a handshake lane's verdict on its peer (true in every other
// thread), and the barrier's reduction ANDs them: true when every lane found
// its peer making this call, false when one found another call or stopped
// (its lane reported why). A block without work has no lanes, and no outputs
// to judge: true. The verdict travels in the barrier itself (BAR.RED.AND),
// so nothing is stored or loaded after it. The lanes' checks are bounded, and
// the block's end waits for them anyway; a barrier, not a spin, so the
// threads done early sleep instead of polling beside the lanes.
__device__ __forceinline__ bool block_verdict(bool agreed) { return __syncthreads_and(agreed) != 0; }

// ---------------------------------------------------------------------------
// Steps: the one loop body every algorithm is made of
// ---------------------------------------------------------------------------

// A thread takes units first, first + stride, ... below a count, UNROLL at a
// time: one step. In a step every rank's pack of each of its UNROLL units is
// loaded before any is used, so UNROLL × world loads are in flight at once;
// then, for Lamport data, every peer's pack is polled until it has arrived;
// then each unit's packs are used (reduced, stored, sent). The kernels differ
// only in where packs come from and what they do with them, which they pass
// as small lambdas (inlined: no call, no indirection).

// The units of one step: base, base + stride, ... (UNROLL of them).
struct Step {
    u64 base;
    u64 stride;
    u64 count;
    __device__ __forceinline__ u64 unit(int u) const { return base + (u64)u * stride; }
    __device__ __forceinline__ bool has(int u) const { return unit(u) < count; }
};

// This rank's own pack of each unit: v[u] = load(i).
template <int UNROLL, typename Load>
__device__ __forceinline__ void load_step(const Step& s, Pack (&v)[UNROLL], Load load) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
        if (s.has(u)) v[u] = load(s.unit(u));
}

// Hands each unit's own pack to use(i, v[u]).
template <int UNROLL, typename Use>
__device__ __forceinline__ void use_step(const Step& s, const Pack (&v)[UNROLL], Use use) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
        if (s.has(u)) use(s.unit(u), v[u]);
}

// Every rank's pack of each unit: this rank's from own(i), rank p's from the
// registered buffer at at(p, i) (a relaxed system-scope load: data behind a
// barrier, or a Lamport slot).
template <int W, int UNROLL, typename Own, typename At>
__device__ __forceinline__ void load_ranks(const CollArgs& a, const Step& s, Pack (&v)[UNROLL][World<W>::SLOTS],
                                           Own own, At at) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        if (!s.has(u)) continue;
#pragma unroll
        for (int p = 0; p < World<W>::SLOTS; ++p) {
            if ((u32)p >= World<W>::size(a)) continue;
            v[u][p] = (u32)p == a.rank ? own(s.unit(u)) : ld_pack_sys(at((u32)p, s.unit(u)));
        }
    }
}

// Polls every peer's Lamport pack of each unit until it has arrived (rank p's
// at at(p, i)); false once a wait must stop (Deadline::must_stop).
template <int W, int UNROLL, typename At>
__device__ __forceinline__ bool wait_ranks(const CollArgs& a, const Step& s, Pack (&v)[UNROLL][World<W>::SLOTS],
                                           u32 kernel, At at) {
    Deadline deadline(a.timeout_ns);
    // A flag rather than an early return: leaving the unrolled loops from the
    // middle made the compiler keep the wait's state in local memory.
    bool ok = true;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        if (!s.has(u)) continue;
#pragma unroll
        for (int p = 0; p < World<W>::SLOTS; ++p) {
            if ((u32)p >= World<W>::size(a) || (u32)p == a.rank || !ok) continue;
            ok = lamport_wait(v[u][p], at((u32)p, s.unit(u)), deadline, a, (u32)p, kernel);
        }
    }
    return ok;
}

// One receiving step: load every rank's pack of each unit, wait for the
// Lamport ones (LAMPORT), and hand each unit's packs to use(i, v). False once
// a wait must stop.
template <int W, int UNROLL, bool LAMPORT, typename Own, typename At, typename Use>
__device__ __forceinline__ bool receive_step(const CollArgs& a, const Step& s, u32 kernel, Own own, At at, Use use) {
    Pack v[UNROLL][World<W>::SLOTS];
    load_ranks<W, UNROLL>(a, s, v, own, at);
    if (LAMPORT && !wait_ranks<W, UNROLL>(a, s, v, kernel, at)) return false;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
        if (s.has(u)) use(s.unit(u), v[u]);
    return true;
}

// Shards (the two-shot algorithms): a message of `packs` packs is cut into
// world shards of `shard` packs (the last ones may be short or empty); unit
// j of a step stands for pack j of every shard, and shard s has it when
// s * shard + j < packs.
struct Shards {
    u64 shard;
    u64 packs;
    __device__ __forceinline__ bool has(u32 s, u64 j) const { return j < shard && (u64)s * shard + j < packs; }
};

// Pack j of every other rank's shard, from load(s, j).
template <int W, int UNROLL, typename Load>
__device__ __forceinline__ void load_shards(const CollArgs& a, const Step& st, const Shards& sh,
                                            Pack (&v)[UNROLL][World<W>::SLOTS], Load load) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
        for (int s = 0; s < World<W>::SLOTS; ++s)
            if ((u32)s < World<W>::size(a) && (u32)s != a.rank && sh.has((u32)s, st.unit(u)))
                v[u][s] = load((u32)s, st.unit(u));
    }
}

// Polls pack j of every other rank's shard, a Lamport pack at at(s, j),
// until it has arrived; false once a wait must stop.
template <int W, int UNROLL, typename At>
__device__ __forceinline__ bool wait_shards(const CollArgs& a, const Step& st, const Shards& sh,
                                            Pack (&v)[UNROLL][World<W>::SLOTS], u32 kernel, At at) {
    Deadline deadline(a.timeout_ns);
    bool ok = true;  // not an early return: see wait_ranks
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
        for (int s = 0; s < World<W>::SLOTS; ++s) {
            if ((u32)s >= World<W>::size(a) || (u32)s == a.rank || !sh.has((u32)s, st.unit(u)) || !ok) continue;
            ok = lamport_wait(v[u][s], at((u32)s, st.unit(u)), deadline, a, (u32)s, kernel);
        }
    }
    return ok;
}

// Hands pack j of every other rank's shard to use(s, j, v).
template <int W, int UNROLL, typename Use>
__device__ __forceinline__ void use_shards(const CollArgs& a, const Step& st, const Shards& sh,
                                           const Pack (&v)[UNROLL][World<W>::SLOTS], Use use) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
        for (int s = 0; s < World<W>::SLOTS; ++s)
            if ((u32)s < World<W>::size(a) && (u32)s != a.rank && sh.has((u32)s, st.unit(u)))
                use((u32)s, st.unit(u), v[u][s]);
    }
}

// Stores pack j of every other rank's shard where it belongs in the output:
// the gather step of both two-shot algorithms.
template <int W, int UNROLL>
__device__ __forceinline__ void store_shards(const CollArgs& a, const Step& st, const Shards& sh,
                                             const Pack (&v)[UNROLL][World<W>::SLOTS]) {
    char* out = (char*)a.output;
    const bool aligned = a.io_aligned != 0u;
    use_shards<W, UNROLL>(a, st, sh, v,
                          [&](u32 s, u64 j, const Pack& p) { st_io(out + (s * sh.shard + j) * 16u, p, aligned); });
}

// ---------------------------------------------------------------------------
// Call handshake: every rank makes the same call in the same slot
// ---------------------------------------------------------------------------

// Ranks must issue the same sequence of collectives (collective, algorithm,
// dtype, size). A rank that does not would otherwise read a peer's data as if
// it were its own call's (garbage), or wait for data that never comes (a bare
// timeout). So block 0 of every call (block 0 always has work) tells each peer
// what it is calling: one thread per peer stores this rank's mailbox value
// into slot `rank` of the peer's mailbox. And every block with work checks
// what each peer calls, reading the peer's slot of its own rank's mailbox
// (local memory), before any of its threads uses a peer's data: in the
// barrier algorithms barrier thread t, for peer t, inside the first barrier
// (which ends with the whole block's verdict); in the Lamport algorithms one
// of the block's last `world` threads per peer (which small messages give no
// data), before it waits for data; its verdict is ANDed into a barrier at the
// block's end (block_verdict), and a thread of a block that found another
// call marks its outputs, whatever it stored before. The verdict is read last, not before
// the first data is used, so that the check runs beside the data's path
// instead of in it: the block ends only once its handshake lanes are done
// anyway. A thread never waits long for data of a call that will fail: the
// lane that finds the mismatch reports it at once, and every wait stops on a
// rank's fault (Deadline::must_stop).
//
// A mailbox value is the call signature the host computed (protocol::
// signature: algorithm, collective, dtype, bytes, with a bit that makes it
// non-zero) with the low 8 bits of the call count on top (every block of a
// rank counts every call, so all blocks agree on it). While any block of a
// rank runs call k, every peer has sent its value of call k - 1 at least
// (this rank's block 0 finished call k - 1 only after seeing it) and of call
// k + 1 at most (a peer finishes call k only after its block 0 saw this
// rank's value of call k, and cannot finish call k + 1 before this rank sends
// its value of it, in the next kernel). So 8 bits tell the previous, the same
// and the next call apart: an older value has not arrived yet; a newer one
// means the peer finished this call, which it could only do after checking
// this rank's value of it, so the two were equal.

/// No peer: this thread takes no part in the handshake.
#define CT_NO_PEER 0xffffffffu

__device__ __forceinline__ u64 mailbox_value(const CollArgs& a, u32 calls) {
    return ((u64)(calls & 0xffu) << 56) | a.call_sig;
}

// Rank `owner`'s mailbox slot written by rank `source`.
__device__ __forceinline__ u64* mailbox_slot(const CollArgs& a, u32 owner, u32 source) {
    return ctrl_u64(ctrl_of(a, owner), CT_CTRL_MAILBOX) + source;
}

// The peer this thread handshakes with in a Lamport algorithm: thread
// blockDim - world + p of a block with work takes peer p (every block has at
// least CT_MAX_WORLD threads: protocol::launch); block 0's also sends this
// rank's value to it. CT_NO_PEER for every other thread. The fused
// one-shot's launch adds a warp after its rows when the block has room
// (protocol::rows::row_launch), so that its lanes hold no row: a lane checks
// its peer before its first wait for data, and one holding packs held up
// its rows' barrier.
template <int W>
__device__ __forceinline__ u32 lamport_handshake_peer(const CollArgs& a, bool has_work) {
    const u32 world = World<W>::size(a);
    if (!has_work || world < 2u || threadIdx.x < blockDim.x - world) return CT_NO_PEER;
    const u32 peer = threadIdx.x - (blockDim.x - world);
    return peer == a.rank ? CT_NO_PEER : peer;
}

// Whether a thread of a Lamport call (one_shot_push, two_shot_push) has
// nothing left to do once the call state is read and block 0's lanes have
// sent: no unit of `units`, no pack of the previous call's buffer to re-arm,
// and no peer to check (not a handshake lane). Such a thread returns at once
// instead of running the kernel's address arithmetic and loop tests and
// parking at the verdict's barrier: the barrier waits only for threads that
// have not exited (PTX: barrier{.cta} waits for the non-exited threads, and
// an exiting thread releases a barrier it was holding up), and it stores no
// output, so it has none to judge. A small message leaves most warps of the
// blocks with work like that, and their arithmetic would take issue slots
// from the data warps of the same SM while those issue their pushes.
__device__ __forceinline__ bool lamport_idle(const CallState& state, u32 rearm, u64 first, u64 units, u32 shake) {
    return first >= units && shake == CT_NO_PEER && first >= (u64)state.used_bytes(rearm) / 16u;
}

__device__ __forceinline__ void handshake_send(const CollArgs& a, u32 peer, u32 calls) {
    st_u64_relaxed_sys(mailbox_slot(a, peer, a.rank), mailbox_value(a, calls));
}

__device__ __forceinline__ u64 handshake_peek(const CollArgs& a, u32 peer) {
    return ld_u64_relaxed_sys(mailbox_slot(a, a.rank, peer));
}

// -1: the peer's value of this call has not arrived; 0: agreed (or the peer
// is past this call); 1: the peer made another call in this slot.
__device__ __forceinline__ int handshake_compare(u64 seen, u64 mine) {
    if ((seen & CT_SIG_VALID) == 0ull) return -1;
    const int ahead = (int)(signed char)(unsigned char)((seen >> 56) - (mine >> 56));
    if (ahead < 0) return -1;
    if (ahead > 0) return 0;
    return seen == mine ? 0 : 1;
}

// Reports a mismatch with `peer`; false.
__device__ __forceinline__ bool handshake_mismatch(const CollArgs& a, u32 peer, u32 kernel, u64 seen) {
    report_fault(a, CT_ERR_MISMATCH, kernel, CT_PHASE_HANDSHAKE, peer, a.call_sig, seen & CT_SIG_MASK);
    return false;
}

// Waits (bounded) until `peer`'s value of this call has arrived and checks
// it. `seen` is a first read. False once the call must stop (a mismatch,
// reported, or Deadline::must_stop).
__device__ __forceinline__ bool handshake_check(const CollArgs& a, u32 peer, u32 calls, u32 kernel, u64 seen) {
    const u64 mine = mailbox_value(a, calls);
    Deadline deadline(a.timeout_ns);
    for (;;) {
        const int verdict = handshake_compare(seen, mine);
        if (verdict == 0) return true;
        if (verdict > 0) return handshake_mismatch(a, peer, kernel, seen);
        if (deadline.must_stop(a, kernel, CT_PHASE_HANDSHAKE, peer)) return false;
        seen = handshake_peek(a, peer);
    }
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
// this one (flag_reached).
//
// `handshake` (the first barrier of a call, `calls` the block's count): thread
// t checks the peer's mailbox value while it spins, reading flag and mailbox
// with one round of loads, so a mismatch is seen even when the peer, making
// another kind of call, never signals this barrier; block 0's thread t also
// sends this call's value before its flag (so the flag's release publishes
// it). Returns false in every thread of the block if the call must stop.
template <int W>
__device__ __forceinline__ bool block_barrier(const CollArgs& a, u64 value, u32 kernel, u32 phase,
                                              bool handshake = false, u32 calls = 0u) {
    __syncthreads();
    bool ok = true;
    const u32 t = threadIdx.x;
    if (t < World<W>::size(a)) {
        const bool shake = handshake && t != a.rank;
        if (shake && blockIdx.x == 0u) handshake_send(a, t, calls);
        st_u64_release_sys(barrier_flag(a, t, blockIdx.x, a.rank), value);
        const u64* mine = barrier_flag(a, a.rank, blockIdx.x, t);
        const u64 sig = mailbox_value(a, calls);
        bool agreed = !shake;
        Deadline deadline(a.timeout_ns);
        for (;;) {
            const u64 flag = ld_u64_relaxed_sys(mine);
            if (!agreed) {
                const u64 seen = handshake_peek(a, t);
                const int verdict = handshake_compare(seen, sig);
                if (verdict > 0) {
                    ok = handshake_mismatch(a, t, kernel, seen);
                    break;
                }
                agreed = verdict == 0;
            }
            if (flag_reached(flag, value)) break;
            if (deadline.must_stop(a, kernel, phase, t)) {
                ok = false;
                break;
            }
        }
        if (ok) {
            (void)ld_u64_acquire_sys(mine);
            // Block 0's peer stored its mailbox value before its flag: after
            // the acquire it is there (or a later one). Another block's flag
            // does not publish it, so the check waits for it (bounded).
            if (!agreed) ok = handshake_check(a, t, calls, kernel, handshake_peek(a, t));
        }
    }
    return __syncthreads_and(ok) != 0;
}

// ---------------------------------------------------------------------------
// Rows: the fused all-reduce + add + RMSNorm
// ---------------------------------------------------------------------------

// A call of the fused collective is `rows` rows (tokens) of `hidden` elements,
// `row_packs` packs each (the host takes only hidden sizes of whole packs:
// protocol::rows). The norm of a row needs every pack of it, so a row, not a
// pack, is the unit of work: a group of `group` threads (whole warps: enough
// for one pack each, at most the block) takes a row, pack p of it by thread
// p mod group of the group; a block holds `groups` groups and takes rows in
// passes. The host lays this out (protocol::rows::row_launch: the block's
// threads, `group` and `groups`) and passes it in the arguments, with the
// rows: one rule, and no division on the kernels' way to their first
// store. Rows are dealt to the blocks first: in pass k, group g of block b
// takes row k * gridDim * groups + g * gridDim + b, so a call of a few rows
// (decode) has one row per block, each on an SM of its own, instead of
// filling the groups of the first blocks; and a block has as many threads as
// a pass needs groups, so such a block has no idle warps (kernels/GPU.md,
// "Rows", has the A/B of both), but one: the fused one-shot's, in a world of
// two or more, has a warp after its groups for its handshake lanes when the
// block has room (lamport_handshake_peer). Every thread of a block runs every pass of
// its block (the block's barriers need them all), with a row or not. Every
// phase of a fused kernel that touches the user's tensors keeps to this, so
// a pack of the output and of the residual is written by the thread that
// read it (an in-place call is safe) and once.
__device__ __forceinline__ u64 first_row_of_block() { return (u64)blockIdx.x; }
// g * gridDim in 32 bits (g < blockDim, so it fits): in 64 bits the
// world-size-2 build's fused one-shot spilled on sm_100.
__device__ __forceinline__ u64 row_of_group(u64 first, u32 g) { return first + (u64)(g * gridDim.x); }

struct Rows {
    u64 rows;       // rows of the call
    u32 row_packs;  // packs of a row
    u32 group;      // threads per row
    u32 groups;     // rows a block takes per pass
    u32 g;          // this thread's group (>= groups: none, it idles)

    // Group 0's row in this block's first pass (a pass is named by its
    // group 0's row), and the step from one pass to the next.
    __device__ __forceinline__ u64 first() const { return first_row_of_block(); }
    __device__ __forceinline__ u64 step() const { return (u64)gridDim.x * groups; }
    // This thread's row in the pass that starts at `first`.
    __device__ __forceinline__ u64 row(u64 first) const { return row_of_group(first, g); }
    // Whether this thread has a row in the pass that starts at `first`.
    __device__ __forceinline__ bool has(u64 first) const { return g < groups && row(first) < rows; }
    // This thread's place in its group.
    __device__ __forceinline__ u32 lane() const { return threadIdx.x - g * group; }
    // Whether this block has any row.
    __device__ __forceinline__ bool block_has_work() const { return first() < rows; }
};

template <typename E>
__device__ __forceinline__ Rows rows_of(const CollArgs& a) {
    Rows r;
    r.row_packs = a.hidden * (u32)sizeof(typename E::Bits) / 16u;
    r.group = a.row_group;
    r.groups = a.row_groups;
    r.g = threadIdx.x / r.group;
    r.rows = a.rows;
    return r;
}

// x, the new residual of one pack: every rank's pack summed in rank order,
// then the residual added, in f32, rounded once (the same order in every
// fused kernel, so they all hold the same x).
template <typename E, int SLOTS>
__device__ __forceinline__ Pack add_residual(const Pack (&v)[SLOTS], u32 world, const Pack& residual) {
    PackAcc<E> acc;
    acc.first(v[0]);
#pragma unroll
    for (int p = 1; p < SLOTS; ++p)
        if ((u32)p < world) acc.add(v[p]);
    acc.add(residual);
    return acc.result();
}

// The squares of a pack's elements, summed in f32 from +0.0 (squares are never
// -0.0, so the start changes nothing).
template <typename E>
__device__ __forceinline__ float sum_squares(const Pack& x) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < E::LANES; ++k) {
        const float f = pack_lane<E>(x, k);
        s += f * f;
    }
    return s;
}

// One pack of the output: x × scale × weight per element, in f32, rounded once.
template <typename E>
__device__ __forceinline__ Pack scaled(const Pack& x, const Pack& weight, float scale) {
    PackAcc<E> acc;
#pragma unroll
    for (int k = 0; k < E::LANES; ++k) acc.f[k] = pack_lane<E>(x, k) * scale * pack_lane<E>(weight, k);
    return acc.result();
}

// The sum of `v` over the threads of each group, the same bits in every
// thread of the group and on every rank that runs the same call: a butterfly
// within each warp (lane i and lane i ^ o add the same two values), then the
// group's warps in order, through shared memory. Its first barrier is also
// the block's agreement that every thread is `ok`: false in every thread when
// one is not (the sum is then not taken). Every thread of the block calls it,
// idle ones with 0.
__device__ __forceinline__ bool group_sum_if_all(float& v, bool ok, const Rows& r, u32 pass) {
    // Two sets of sums, one per pass parity, so that no second barrier is
    // needed before the next pass writes its own: pass k + 2 writes pass k's
    // set only after every thread of the block has passed pass k + 1's
    // barrier, so after every thread read pass k's sums.
    __shared__ float warp_sums_of[2][CT_MAX_THREADS / 32];
    float* const warp_sums = warp_sums_of[pass & 1u];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31u) == 0u) warp_sums[threadIdx.x >> 5] = v;
    if (__syncthreads_and(ok) == 0) return false;
    float sum = 0.0f;
    if (r.g < r.groups) {
        const u32 first = r.g * r.group / 32u;
        sum = warp_sums[first];
        for (u32 w = 1; w < r.group / 32u; ++w) sum += warp_sums[first + w];
    }
    v = sum;
    return true;
}

// 1 / sqrt(mean of the squares + eps): what every element of the row is
// scaled by. The mean is an IEEE division (NVRTC compiles with --prec-div);
// the reciprocal square root is rsqrtf (at most 2 units in the last place,
// as in vLLM's csrc/layernorm_kernels.cu and llama.cpp's ggml-cuda/norm.cu)
// rather than an IEEE square root and an IEEE division: two dependent
// IEEE sequences, each with its slow-path branch, on every row's way from
// its barrier to its stores. Measured on one H200 (kernels/GPU.md, "Rows").
// Every rank computes the same bits from the same sum.
__device__ __forceinline__ float rms_scale(float sum_of_squares, u32 hidden, float eps) {
    return rsqrtf(sum_of_squares / (float)hidden + eps);
}

// The rows of a call, each normalised once every pack of it is known. In
// every pass, each thread gets x (the new residual) of its packs of its row
// from x_of(i, x), which returns false once a wait must stop; stores it into
// the residual and sums its squares. The block then agrees that every pack of
// its rows arrived and that every thread's `verdict` holds (one barrier every
// thread takes, which also sums each row's squares: group_sum_if_all), and
// each thread stores its packs of the output.
//
// A thread with at most kRegPacks packs of its row keeps their x in
// registers across the barrier; with more, it reads x back from the residual
// it stored itself (its own stores, so in program order), as registers for
// all of them would be live across its later waits. The fused kernels keep
// one (a row of at most `group` packs: the hidden sizes of decode, 4096 and
// 8192 bf16 in a world of two, 4096 in larger worlds): at a world of two's
// 64 registers a thread, two spill.
//
// The weight (the same in every pass) of a row of several packs a thread
// kept in registers is loaded once, before the first wait. That of a row of
// one pack a thread is loaded in every pass: before the barrier, once the
// thread has its x, when kWeightBeforeBarrier (the add + RMSNorm kernel,
// whose x loads do not wait: the load then overlaps the barrier and the
// scale), else after it (the fused kernels, where loaded before the barrier
// it cost 0.4-0.7 us a call at world size 2, for a reason not found). Each
// choice measured both ways on one H200 (kernels/GPU.md, "Rows").
//
// `ok` false (a handshake lane that found another call) stops the thread's
// waits; `verdict` false (the add + RMSNorm kernel's fault word, read while
// its rows load) only enters the barrier. False, in every thread of the
// block, once a pack did not arrive or either is false: the block stops, and
// its caller marks its rows. Every thread of the block calls it.
template <typename E, u32 kRegPacks, bool kWeightBeforeBarrier, typename XOf>
__device__ __forceinline__ bool norm_rows(const CollArgs& a, bool ok, bool verdict, XOf x_of) {
    const Rows r = rows_of<E>(a);
    const u32 lane = r.lane();
    char* residual = (char*)a.residual;
    const char* weight = (const char*)a.weight;
    char* out = (char*)a.output;
    const bool aligned = a.io_aligned != 0u;
    const bool in_regs = r.row_packs <= kRegPacks * r.group;
    Pack w[kRegPacks];
    const bool weight_first = in_regs && r.row_packs > r.group;
    if (weight_first) {
#pragma unroll
        for (u32 k = 0; k < kRegPacks; ++k)
            if (lane + k * r.group < r.row_packs) w[k] = ld_io(weight + (u64)(lane + k * r.group) * 16u, aligned);
    }
    u32 pass = 0;
    for (u64 first = r.first(); first < r.rows; first += r.step(), ++pass) {
        const bool mine = r.has(first);
        const u64 base = r.row(first) * r.row_packs;
        float squares = 0.0f;
        Pack x[kRegPacks];
        if (mine && in_regs) {
#pragma unroll
            for (u32 k = 0; k < kRegPacks; ++k) {
                const u32 p = lane + k * r.group;
                if (ok && p < r.row_packs) {
                    ok = x_of(base + p, x[k]);
                    if (ok) {
                        st_io(residual + (base + p) * 16u, x[k], aligned);
                        squares += sum_squares<E>(x[k]);
                    }
                }
            }
        } else if (mine) {
            for (u32 p = lane; ok && p < r.row_packs; p += r.group) {
                ok = x_of(base + p, x[0]);
                if (!ok) break;
                st_io(residual + (base + p) * 16u, x[0], aligned);
                squares += sum_squares<E>(x[0]);
            }
        }
        if (kWeightBeforeBarrier && mine && in_regs && !weight_first) {
#pragma unroll
            for (u32 k = 0; k < kRegPacks; ++k) {
                const u32 p = lane + k * r.group;
                if (ok && p < r.row_packs) w[k] = ld_io(weight + (u64)p * 16u, aligned);
            }
        }
        if (!group_sum_if_all(squares, ok && verdict, r, pass)) return false;
        const float scale = rms_scale(squares, a.hidden, __uint_as_float(a.eps_bits));
        if (mine && in_regs) {
#pragma unroll
            for (u32 k = 0; k < kRegPacks; ++k) {
                const u32 p = lane + k * r.group;
                if (!kWeightBeforeBarrier && !weight_first && p < r.row_packs)
                    w[k] = ld_io(weight + (u64)p * 16u, aligned);
                if (p < r.row_packs) st_io(out + (base + p) * 16u, scaled<E>(x[k], w[k], scale), aligned);
            }
        } else if (mine) {
            for (u32 p = lane; p < r.row_packs; p += r.group) {
                const Pack xp = ld_io(residual + (base + p) * 16u, aligned);
                const Pack wp = ld_io(weight + (u64)p * 16u, aligned);
                st_io(out + (base + p) * 16u, scaled<E>(xp, wp, scale), aligned);
            }
        }
    }
    return ok;
}

// Marks every pack of every row this thread takes, in both outputs of the
// call (the normed output and the new residual): a failed fused call leaves
// no word of either looking like a result, the residual's old value
// included. Not inlined (the cold path), on scalars.
__device__ __noinline__ void mark_failed_row_packs(char* out, char* residual, bool aligned, u64 rows, u32 row_packs,
                                                   u32 group, u32 groups) {
    Pack nan;
#pragma unroll
    for (int k = 0; k < 4; ++k) nan.w[k] = 0xffffffffu;
    const u32 g = threadIdx.x / group;
    if (g >= groups) return;
    for (u64 first = first_row_of_block(); row_of_group(first, g) < rows; first += (u64)gridDim.x * groups)
        for (u32 p = threadIdx.x - g * group; p < row_packs; p += group) {
            const u64 row = row_of_group(first, g);
            const u64 offset = (row * row_packs + p) * 16u;
            st_io(out + offset, nan, aligned);
            st_io(residual + offset, nan, aligned);
        }
}

template <typename E>
__device__ __forceinline__ void mark_failed_rows(const CollArgs& a) {
    const Rows r = rows_of<E>(a);
    mark_failed_row_packs((char*)a.output, (char*)a.residual, a.io_aligned != 0u, r.rows, r.row_packs, r.group,
                          r.groups);
}
