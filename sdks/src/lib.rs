//! No code: this crate exists so that `cargo test --workspace` runs the Python (`sdks/python`)
//! and TypeScript (`sdks/typescript`) SDK suites against the `leo` and `leo-mcp` binaries the
//! same command just built (`tests/tests.rs`). The SDKs themselves are not Rust.
