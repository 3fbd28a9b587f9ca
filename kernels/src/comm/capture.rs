//! Graphs captured on a rank, and what keeps the rank's resources alive for
//! them.
//!
//! A captured kernel's arguments hold the addresses of the rank's registered
//! buffers, its peers' mappings and its fault mirror, and its function belongs
//! to the rank's loaded module; a captured NCCL call holds the communicator.
//! So a graph must not outlive them: [`Captured`] and [`Lifeline`] hold the
//! rank's resources (reference-counted), which are released only when the
//! rank and every graph captured on it are gone.

use std::sync::Arc;

use cudarc::driver::CudaGraph;

use super::resources::RankResources;
use crate::error::{DriverContext, Result};

/// Keeps a rank's buffers, mappings, kernels and NCCL communicator alive
/// ([`RankComm::lifeline`](super::RankComm::lifeline)). Store one with any
/// graph of your own that contains this rank's calls.
#[derive(Clone)]
pub struct Lifeline {
    res: Arc<RankResources>,
}

impl Lifeline {
    pub(crate) fn new(res: Arc<RankResources>) -> Lifeline {
        Lifeline { res }
    }

    /// The first fault the rank knows of (`Ok` if none): check it before
    /// replaying a graph of your own.
    pub fn health(&self) -> Result<()> {
        self.res.known_fault()
    }
}

impl std::fmt::Debug for Lifeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lifeline")
            .field("rank", &self.res.rank)
            .finish_non_exhaustive()
    }
}

/// A CUDA graph captured on a rank ([`RankComm::capture`](super::RankComm::capture)).
/// Replays go to the stream it was captured on.
pub struct Captured {
    // Declared first, so the graph is destroyed before the resources it uses
    // can be released.
    graph: CudaGraph,
    lifeline: Lifeline,
}

impl Captured {
    pub(crate) fn new(graph: CudaGraph, lifeline: Lifeline) -> Captured {
        Captured { graph, lifeline }
    }

    /// Replays the graph, unless the rank has failed: then it returns the
    /// rank's first fault and launches nothing.
    pub fn launch(&self) -> Result<()> {
        self.lifeline.health()?;
        self.graph
            .launch()
            .during("replaying a graph")
            .map_err(|e| self.lifeline.res.health.fail(e))
    }

    /// Uploads the graph's resources ahead of its first replay.
    pub fn upload(&self) -> Result<()> {
        self.graph.upload().during("uploading a graph")
    }

    /// The cudarc graph, for what this type does not wrap. Replaying it
    /// directly skips the fault check (the resources stay alive either way).
    pub fn cuda_graph(&self) -> &CudaGraph {
        &self.graph
    }

    /// What keeps the rank's resources alive for this graph.
    pub fn lifeline(&self) -> &Lifeline {
        &self.lifeline
    }
}

#[cfg(test)]
mod tests {

    // The fields' order is what makes the graph go first: check it did not
    // change.
    #[test]
    fn the_graph_is_dropped_before_the_lifeline() {
        let source = include_str!("capture.rs");
        let graph = source.find("    graph: CudaGraph,").expect("graph field");
        let lifeline = source
            .find("    lifeline: Lifeline,")
            .expect("lifeline field");
        assert!(graph < lifeline);
    }
}
