//! The protocol crate's integration tests, one binary as in every crate of the workspace: the
//! input_schema subset check driven by data, and the fuzz corpora replayed.

#![allow(clippy::too_many_lines)]

mod fuzz_inputs;
mod schema_subset;
