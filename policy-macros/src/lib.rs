//! Proc-macro shell over `tuned-schema`.
