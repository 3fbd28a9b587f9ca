// The second maximum is below the first.
mod tables {
    policy_macros::include_tuned!("overlapping_bands", relative_to = file);
}

fn main() {}
