//! Collective selection for engines.
