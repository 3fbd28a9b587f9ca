// The same table key twice in one file.
mod tables {
    policy_macros::include_tuned!("duplicate_table", relative_to = file);
}

fn main() {}
