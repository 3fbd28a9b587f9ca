// A folder without any *.toml file is almost always a wrong path: refused.
mod tables {
    policy_macros::include_tuned!("no_toml_files", relative_to = file);
}

fn main() {}
