// Two files for sm90 nvlink.
mod tables {
    policy_macros::include_tuned!("duplicate_platform", relative_to = file);
}

fn main() {}
