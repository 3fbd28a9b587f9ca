// The fused all-reduce + add + RMSNorm has no NCCL: its open band is the
// unfused path.
mod tables {
    policy_macros::include_tuned!("fused_table_ends_with_nccl", relative_to = file);
}

fn main() {}
