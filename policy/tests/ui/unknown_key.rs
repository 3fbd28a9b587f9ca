// `modes` is a typo of `mode`.
mod tables {
    policy_macros::include_tuned!("unknown_key", relative_to = file);
}

fn main() {}
