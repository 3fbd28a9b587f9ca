// No open band: sizes above 1 GiB have no algorithm.
mod tables {
    policy_macros::include_tuned!("gap_after_last_band", relative_to = file);
}

fn main() {}
