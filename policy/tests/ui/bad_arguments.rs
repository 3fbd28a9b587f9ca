// The folder must be a string literal.
mod tables {
    policy_macros::include_tuned!(tuned);
}

fn main() {}
