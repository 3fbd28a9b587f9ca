// A 2 MiB band for a kernel whose buffers take 1 MiB.
mod tables {
    policy_macros::include_tuned!("over_capacity", relative_to = file);
}

fn main() {}
