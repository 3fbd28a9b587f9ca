// `ring` is not an algorithm.
mod tables {
    policy_macros::include_tuned!("unknown_algorithm", relative_to = file);
}

fn main() {}
