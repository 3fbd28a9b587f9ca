// 1000 bytes is not a multiple of the 16-byte alignment.
mod tables {
    policy_macros::include_tuned!("misaligned_band", relative_to = file);
}

fn main() {}
