//! `leo-mcp`: the per-agent MCP sidecar (built in the sidecar issue).

fn main() {
    eprintln!("leo-mcp: not built yet; see the sidecar issue");
    std::process::exit(2);
}
