// Shared device code of every colltune kernel: types, memory accesses, element
// types and the f32 accumulator, the Lamport sentinel, bounded waits.
//
// This file is compiled by NVRTC at run time, after a prelude of `#define CT_*`
// constants generated from the Rust `protocol` module (so host and device can
// never disagree on a layout). It needs no header: 16-bit float conversions are
// inline PTX `cvt`, and memory-model operations are inline PTX too, so the scope
// and ordering of every access is explicit.
//
// Memory-ordering vocabulary used below:
// - `weak`   plain ld/st: only for data whose publication is ordered by a barrier.
// - `relaxed.sys`  strong, coherent at system scope, no ordering: Lamport data
//   (each 32-bit word is its own "ready" signal) and reads of memory that peers
//   write during this kernel (never served from a stale L1 line).
// - `release.sys` / `acquire.sys`: barrier flags.

typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned short u16;

// Every kernel receives one of these by value. Mirrors `algorithms::args::CollArgs`
// (repr(C)) on the host; field order and types must match exactly.
struct CollArgs {
    u64 push_bufs[CT_MAX_WORLD];  // each rank's push region: 3 buffers x world slots
    u64 staging[CT_MAX_WORLD];    // each rank's staging region: 2 halves
    u64 ctrls[CT_MAX_WORLD];      // each rank's control block
    u64 input;                    // this rank's input (device pointer)
    u64 output;                   // this rank's output
    u64 bytes;                    // bytes each rank contributes (all-gather: one share)
    u64 slot_bytes;               // stride between push slots
    u64 staging_bytes;            // bytes of one staging half
    u64 timeout_ns;               // bound on every wait
    u64 call_sig;                 // what this call is (protocol::signature): compared with peers'
    u64 host_fault;               // this rank's fault words in host memory (device address)
    u64 residual;                 // the fused call's residual: read, then the new residual
    u64 weight;                   // the fused call's RMSNorm weight (hidden elements)
    u32 rank;
    u32 world;
    u32 io_aligned;               // every tensor of the call is 16-byte aligned
    u32 hidden;                   // elements of a row of the fused call (0 otherwise)
    u32 eps_bits;                 // the fused call's epsilon (an f32's bits)
    u32 rows;                     // rows of the fused call, and their layout (protocol::rows::row_launch):
    u32 row_group;                //   threads per row,
    u32 row_groups;               //   rows a block takes per pass
};

struct __align__(16) Pack {
    u32 w[4];
};

// ---------------------------------------------------------------------------
// Memory access primitives
// ---------------------------------------------------------------------------

__device__ __forceinline__ Pack ld_pack(const void* p) {
    Pack v;
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(p)
                 : "memory");
    return v;
}

__device__ __forceinline__ void st_pack(void* p, const Pack& v) {
    asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.w[0]), "r"(v.w[1]),
                 "r"(v.w[2]), "r"(v.w[3])
                 : "memory");
}

__device__ __forceinline__ Pack ld_pack_sys(const void* p) {
    Pack v;
    asm volatile("ld.relaxed.sys.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(p)
                 : "memory");
    return v;
}

__device__ __forceinline__ void st_pack_sys(void* p, const Pack& v) {
    asm volatile("st.relaxed.sys.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.w[0]),
                 "r"(v.w[1]), "r"(v.w[2]), "r"(v.w[3])
                 : "memory");
}

__device__ __forceinline__ u16 ld_u16_sys(const void* p) {
    u16 v;
    asm volatile("ld.relaxed.sys.global.u16 %0, [%1];" : "=h"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u32 ld_u32_sys(const void* p) {
    u32 v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u64 ld_u64_relaxed_sys(const u64* p) {
    u64 v;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u64 ld_u64_acquire_sys(const u64* p) {
    u64 v;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_u64_release_sys(u64* p, u64 v) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ u64 globaltimer_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// A user tensor may be a view at any element offset: when either pointer is not
// 16-byte aligned the host says so and these fall back to 16-bit accesses (every
// supported element is at least 2-byte aligned). The choice depends only on this
// rank's own pointers, which no peer ever touches, so ranks may differ here.
__device__ __forceinline__ Pack ld_io(const char* p, bool aligned) {
    if (aligned) return ld_pack(p);
    const u16* h = (const u16*)p;
    Pack v;
#pragma unroll
    for (int k = 0; k < 4; ++k) v.w[k] = (u32)h[2 * k] | ((u32)h[2 * k + 1] << 16);
    return v;
}

__device__ __forceinline__ void st_io(char* p, const Pack& v, bool aligned) {
    if (aligned) {
        st_pack(p, v);
        return;
    }
    u16* h = (u16*)p;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        h[2 * k] = (u16)(v.w[k] & 0xffffu);
        h[2 * k + 1] = (u16)(v.w[k] >> 16);
    }
}

// ---------------------------------------------------------------------------
// Element types: bit patterns <-> f32 (exact widening, round-to-nearest-even
// narrowing; NaN, infinities, subnormals and signed zeros pass through: NVRTC
// compiles with --ftz=false).
// ---------------------------------------------------------------------------

struct Bf16 {
    typedef u16 Bits;
    static const int LANES = 8;  // per 16-byte pack
    __device__ static __forceinline__ float to_f32(u16 h) { return __uint_as_float((u32)h << 16); }
    __device__ static __forceinline__ u16 from_f32(float f) {
        u16 h;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
        return h;
    }
};

struct F16 {
    typedef u16 Bits;
    static const int LANES = 8;
    __device__ static __forceinline__ float to_f32(u16 h) {
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
        return f;
    }
    __device__ static __forceinline__ u16 from_f32(float f) {
        u16 h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
        return h;
    }
};

struct F32 {
    typedef u32 Bits;
    static const int LANES = 4;
    __device__ static __forceinline__ float to_f32(u32 b) { return __uint_as_float(b); }
    __device__ static __forceinline__ u32 from_f32(float f) { return __float_as_uint(f); }
};

// Lane k of a pack: 16-bit lanes are little-endian halves of the 32-bit words,
// so element 2i is the low half of word i (the layout of the tensor in memory).
template <typename E>
__device__ __forceinline__ float pack_lane(const Pack& v, int k) {
    if (E::LANES == 4) return E::to_f32((typename E::Bits)v.w[k]);
    u32 word = v.w[k >> 1];
    return E::to_f32((typename E::Bits)((k & 1) ? (word >> 16) : (word & 0xffffu)));
}

// f32 accumulator of one pack. Sums always start from rank 0's value (not from
// +0.0, which would turn an all -0.0 column into +0.0) and add ranks in order
// 0..W-1, so every rank produces the same bits.
template <typename E>
struct PackAcc {
    float f[E::LANES];
    __device__ __forceinline__ void first(const Pack& v) {
#pragma unroll
        for (int k = 0; k < E::LANES; ++k) f[k] = pack_lane<E>(v, k);
    }
    __device__ __forceinline__ void add(const Pack& v) {
#pragma unroll
        for (int k = 0; k < E::LANES; ++k) f[k] += pack_lane<E>(v, k);
    }
    __device__ __forceinline__ Pack result() const {
        Pack v;
        if (E::LANES == 4) {
#pragma unroll
            for (int k = 0; k < 4; ++k) v.w[k] = (u32)E::from_f32(f[k]);
        } else {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                u32 lo = (u32)E::from_f32(f[2 * k]) & 0xffffu;
                u32 hi = (u32)E::from_f32(f[2 * k + 1]) & 0xffffu;
                v.w[k] = lo | (hi << 16);
            }
        }
        return v;
    }
};

// ---------------------------------------------------------------------------
// Lamport sentinel
// ---------------------------------------------------------------------------

__device__ __forceinline__ bool has_sentinel(const Pack& v) {
    return v.w[0] == CT_SENTINEL || v.w[1] == CT_SENTINEL || v.w[2] == CT_SENTINEL ||
           v.w[3] == CT_SENTINEL;
}

// The one documented bit change of the push algorithms: a 32-bit word equal to
// the sentinel (f32 -0.0; for 16-bit types the pair (+0.0, -0.0)) is sent as 0
// (+0.0 / (+0.0, +0.0)), otherwise the receiver could never see it arrive. A
// rank applies it to its own contribution too, so every rank sums the same bits.
__device__ __forceinline__ Pack without_sentinel(Pack v) {
#pragma unroll
    for (int k = 0; k < 4; ++k)
        if (v.w[k] == CT_SENTINEL) v.w[k] = 0u;
    return v;
}

__device__ __forceinline__ Pack sentinel_pack() {
    Pack v;
#pragma unroll
    for (int k = 0; k < 4; ++k) v.w[k] = CT_SENTINEL;
    return v;
}

// ---------------------------------------------------------------------------
// Control block, faults, bounded waits
// ---------------------------------------------------------------------------

__device__ __forceinline__ u32* ctrl_of(const CollArgs& a, u32 rank) { return (u32*)a.ctrls[rank]; }

// A 64-bit counter of the control block (word offset `word`, 8-byte aligned).
__device__ __forceinline__ u64* ctrl_u64(u32* ctrl, u32 word) { return (u64*)(ctrl + word); }

__device__ __forceinline__ void st_u32_relaxed_sys(u32* p, u32 v) {
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void st_u64_relaxed_sys(u64* p, u64 v) {
    asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// Records this rank's first fault. The error word of the control block (device
// memory) poisons every later kernel of the rank; the host's copy (pinned host
// memory, `host_fault`) is what the host reads before every call, so a fault is
// known there within nanoseconds of it being written, without a copy or a
// synchronisation. The host words are written details first, error word last,
// with a system fence between: a host that sees the error word sees the rest.
// `mine`/`theirs` are the two call signatures of a mismatch (0 otherwise).
// Not inlined (it is the cold path), and it takes scalars: a reference to the
// kernel's argument block would make every kernel copy it to local memory.
//
// The first fault wins, except that a mismatch replaces a "peer failed" fault
// recorded before it: a peer that made another call fails too, and this rank
// may see that (its waits stop) just before its handshake sees the cause.
__device__ __noinline__ void report_fault_words(u32* ctrl, u32* host, u32 code, u32 info, u64 mine, u64 theirs) {
    u32 prev = atomicCAS(ctrl + CT_CTRL_ERROR, 0u, code);
    if (prev != 0u && (code & 0xffu) == CT_ERR_MISMATCH && (prev & 0xffu) == CT_ERR_PEER_FAILED)
        prev = atomicCAS(ctrl + CT_CTRL_ERROR, prev, code) == prev ? 0u : prev;
    if (prev == 0u) {
        ctrl[CT_CTRL_ERROR_INFO] = info;
        if (host != nullptr) {
            st_u32_relaxed_sys(host + CT_HOST_INFO, info);
            st_u64_relaxed_sys((u64*)(host + CT_HOST_MINE), mine);
            st_u64_relaxed_sys((u64*)(host + CT_HOST_THEIRS), theirs);
            __threadfence_system();
            st_u32_relaxed_sys(host + CT_HOST_ERROR, code);
        }
    }
    __threadfence_system();
}

__device__ __forceinline__ void report_fault(const CollArgs& a, u32 kind, u32 kernel, u32 phase, u32 peer,
                                             u64 mine, u64 theirs) {
    report_fault_words(ctrl_of(a, a.rank), (u32*)a.host_fault, kind | (kernel << 8) | (phase << 16),
                       (peer & 0xffu) | (blockIdx.x << 8), mine, theirs);
}

__device__ __forceinline__ void report_timeout(const CollArgs& a, u32 kernel, u32 phase, u32 peer) {
    report_fault(a, CT_ERR_TIMEOUT, kernel, phase, peer, 0ull, 0ull);
}

// Measures one wait. The clock is only read once the wait has spun a while, so a
// wait that is satisfied at once costs nothing; after that every 64th spin.
struct Deadline {
    u64 start;
    u64 timeout;
    u32 spins;
    __device__ __forceinline__ explicit Deadline(u64 timeout_ns) : start(0), timeout(timeout_ns), spins(0) {}

    // Whether a wait for `peer` in `kernel`/`phase` must stop, checked every
    // 64th spin once the wait has lasted that long. It must when this rank
    // already failed (another block or thread recorded a fault: nothing to
    // report), when the peer it waits for has failed (its error word is set:
    // it will never send; reported as CT_ERR_PEER_FAILED), or when the bound
    // passed (reported as a timeout). So one fault ends every wait of a rank
    // and of its peers within microseconds, not after a timeout each. The
    // report is the one call a wait makes, and only when it stops.
    __device__ __forceinline__ bool must_stop(const CollArgs& a, u32 kernel, u32 phase, u32 peer) {
        if ((++spins & 63u) != 0u) return false;
        const u64 now = globaltimer_ns();
        if (start == 0) {
            start = now;
            return false;
        }
        u32* ctrl = ctrl_of(a, a.rank);
        if (ld_u32_sys(ctrl + CT_CTRL_ERROR) != 0u) return true;
        u32 kind = 0u;
        if (peer != a.rank && ld_u32_sys(ctrl_of(a, peer) + CT_CTRL_ERROR) != 0u)
            kind = CT_ERR_PEER_FAILED;
        else if (now - start > timeout)
            kind = CT_ERR_TIMEOUT;
        if (kind == 0u) return false;
        report_fault_words(ctrl, (u32*)a.host_fault, kind | (kernel << 8) | (phase << 16),
                           (peer & 0xffu) | (blockIdx.x << 8), 0ull, 0ull);
        return true;
    }
};

// Counters only move forward and are 64-bit, so they never wrap in practice;
// they are still compared by signed distance, which stays right across the wrap
// (tests start them just below it).
__device__ __forceinline__ bool flag_reached(u64 flag, u64 target) { return (long long)(flag - target) >= 0; }

__device__ __forceinline__ u64 thread_stride() { return (u64)gridDim.x * blockDim.x; }

#define CT_KERNEL extern "C" __global__ void __launch_bounds__(CT_MAX_THREADS)
// The kernels of the fused all-reduce + add + RMSNorm and its add + RMSNorm
// kernel: one block of the build's size per SM is all they ask for, which
// lets the assembler keep a row's packs and sums in the registers the build
// allows (left to aim for two blocks per SM, it spilled them). At the
// builds' default block sizes this moves no residency bound (protocol::
// launch): the heaviest kernel of every build of one or of three ranks and
// more already holds one block per SM (the two-shot kernels use more than
// half an SM's registers), and a block of 1024 threads, the world-size-2
// build's, fills an SM's registers at 64 each whatever it asks.
#define CT_KERNEL_ONE_BLOCK extern "C" __global__ void __launch_bounds__(CT_MAX_THREADS, 1)
