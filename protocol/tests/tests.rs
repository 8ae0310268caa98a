//! The protocol crate's integration tests, one binary as in every crate of the workspace: the
//! input_schema subset check driven by data, and the fuzz corpora replayed.

mod fuzz_inputs;
mod schema_subset;
