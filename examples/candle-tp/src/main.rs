mod config;
mod model;
mod plan;
mod weights;
fn main() {}
