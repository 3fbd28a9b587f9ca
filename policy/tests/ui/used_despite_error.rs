// A broken file is one error, also where the generated items are used: they
// are defined beside the error, so nothing cascades from it.
mod tables {
    policy_macros::include_tuned!("syntax_error", relative_to = file);
}

fn main() {
    use policy::{Algo, Arch, Collective, DType, Link, Mode, Query};
    let q = Query::new(Collective::AllReduce, Arch::SM90, Link::NvLink, 8, DType::Bf16, Mode::Graph, 4096);
    let _: Algo = tables::select(q);
    let _ = tables::capacity(Arch::SM90, Link::NvLink, Collective::AllReduce, Algo::OneShotPush);
    let _ = tables::table_arch(Arch::SM90, Link::NvLink);
    let _ = tables::PLATFORMS.len();
    let _ = policy::use_tables(&tables::TABLES);
}
