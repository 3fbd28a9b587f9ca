// A folder that does not exist.
mod tables {
    policy_macros::include_tuned!("does_not_exist", relative_to = file);
}

fn main() {}
