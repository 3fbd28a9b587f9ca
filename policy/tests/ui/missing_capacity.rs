// one_shot_pull is used but has no [[capacity]].
mod tables {
    policy_macros::include_tuned!("missing_capacity", relative_to = file);
}

fn main() {}
