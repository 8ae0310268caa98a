//! The protocol crate's integration tests, one binary as in every crate of the workspace: the
//! table of how apps read refusals against its copy for the other SDKs and the docs, the
//! input_schema subset check driven by data, and the fuzz corpora replayed.

#![allow(clippy::too_many_lines)]

mod app_codes;
mod fuzz_inputs;
mod schema_subset;
