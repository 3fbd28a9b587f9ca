// The table sends 448 KiB to NCCL; the assertion wants a custom kernel.
mod tables {
    policy_macros::include_tuned!("violated_assertion", relative_to = file);
}

fn main() {}
