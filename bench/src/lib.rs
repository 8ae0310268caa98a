//! What the bench's binaries share: the three tools and the exact payloads they answer with.
//!
//! The Rust app behind the broker, the floor server (`leo-bench-floor`) and the Python server
//! (`bench/python/server.py`) all answer with these same bytes; `leo-bench` checks each system's
//! first answer against [`payload::content`] before it measures anything.

pub mod payload;
