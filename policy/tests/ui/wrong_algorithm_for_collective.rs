// two_shot_pull has no all-gather.
mod tables {
    policy_macros::include_tuned!("wrong_algorithm_for_collective", relative_to = file);
}

fn main() {}
