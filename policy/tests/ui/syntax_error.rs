// A missing comma between the keys of a band.
mod tables {
    policy_macros::include_tuned!("syntax_error", relative_to = file);
}

fn main() {}
