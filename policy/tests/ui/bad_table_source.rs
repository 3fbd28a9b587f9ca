// A measured table must name its evidence: without it nobody can trace its bands.
mod tables {
    policy_macros::include_tuned!("bad_table_source", relative_to = file);
}

fn main() {}
