//! Tuner library.
