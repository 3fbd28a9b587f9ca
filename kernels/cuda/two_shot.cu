// two_shot_pull: all-reduce as reduce-scatter then all-gather through the staging
// halves of the pull family (see pull.cu for the half / barrier-value rules).
//
// The message of P packs is cut into W shards of S = ceil(P / W) packs (the last
// shards may be short or empty, so any P works). Pack j of every shard is owned by
// the block of thread (j mod stride), the same block for every shard, so:
//   1. copy in: block b copies packs j it owns of EVERY shard into its own half;
//   2. barrier 1 (block b with block b of every rank);
//   3. reduce-scatter: block b reduces its packs of shard `rank` from every rank's
//      half, in rank order, and writes the sums over its own copy of shard `rank`
//      (only this rank reads shard `rank` in this phase, and each thread rewrites
//      exactly the packs it alone read);
//   4. barrier 2;
//   5. all-gather: block b copies its packs of shard s from rank s's half.
// Every rank's output shard s was summed once, by rank s, so all ranks hold the
// same bits.

template <typename E>
__device__ __forceinline__ void two_shot_all_reduce(const CollArgs& a) {
    u32* ctrl = ctrl_of(a, a.rank);
    if (rank_is_poisoned(ctrl)) return;

    const u32 seq0 = ctrl[CT_CTRL_PULL_SEQ];
    const u32 use0 = ctrl[CT_CTRL_PULL_USE];
    const u32 world = a.world;
    const u64 half = (u64)(use0 & 1u) * a.staging_bytes;
    const u64 packs = a.bytes / 16u;
    const u64 shard = (packs + world - 1u) / world;
    const u64 first = first_thread();
    const u64 stride = thread_stride();
    const bool aligned = a.io_aligned != 0u;
    const char* in = (const char*)a.input;
    char* out = (char*)a.output;
    char* my_stage = (char*)a.staging[a.rank] + half;

    for (u64 j = first; j < shard; j += stride)
        for (u32 s = 0; s < world; ++s) {
            const u64 i = (u64)s * shard + j;
            if (i < packs) st_pack(my_stage + i * 16u, ld_io(in + i * 16u, aligned));
        }

    if (block_barrier(a, seq0 + 1u, CT_KERNEL_TWO_SHOT, CT_PHASE_BARRIER_1)) {
        for (u64 j = first; j < shard; j += stride) {
            const u64 i = (u64)a.rank * shard + j;
            if (i >= packs) continue;
            PackAcc<E> acc;
            acc.first(ld_pack_sys((const char*)a.staging[0] + half + i * 16u));
            for (u32 p = 1; p < world; ++p) acc.add(ld_pack_sys((const char*)a.staging[p] + half + i * 16u));
            st_pack(my_stage + i * 16u, acc.result());
        }

        if (block_barrier(a, seq0 + 2u, CT_KERNEL_TWO_SHOT, CT_PHASE_BARRIER_2)) {
            for (u64 j = first; j < shard; j += stride)
                for (u32 s = 0; s < world; ++s) {
                    const u64 i = (u64)s * shard + j;
                    if (i < packs) st_io(out + i * 16u, ld_pack_sys((const char*)a.staging[s] + half + i * 16u), aligned);
                }
        }
    }

    if (is_last_block(ctrl + CT_CTRL_PULL_DONE) && threadIdx.x == 0) {
        ctrl[CT_CTRL_PULL_SEQ] = seq0 + 2u;
        ctrl[CT_CTRL_PULL_USE] = use0 + 1u;
    }
}

CT_KERNEL colltune_two_shot_all_reduce_bf16(const CollArgs a) { two_shot_all_reduce<Bf16>(a); }
CT_KERNEL colltune_two_shot_all_reduce_f16(const CollArgs a) { two_shot_all_reduce<F16>(a); }
CT_KERNEL colltune_two_shot_all_reduce_f32(const CollArgs a) { two_shot_all_reduce<F32>(a); }
