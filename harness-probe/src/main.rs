//! `harness-probe`: measures which MCP clients re-list tools (built in the probe issue).

fn main() {
    eprintln!("harness-probe: not built yet; see the probe issue");
    std::process::exit(2);
}
