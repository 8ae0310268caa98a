//! The banner `leo broker` prints on stdout: where it listens, the token, and commands a person
//! pastes as they are. Every command must work as printed, so a binary that the shell would not
//! find by name (`target/release/leo` right after a build) is printed by its absolute path:
//! `leo` is this executable, `leo-mcp` the one built next to it. A test runs the agent setup
//! lines with the real harness CLIs (`broker/tests/setup_lines.rs`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use leo_broker::home::Home;

/// The banner for a broker on `home`, listening on `tcp` when the web listener is on, with
/// HTTPS when `tls`.
pub fn print(home: &Home, tcp: Option<SocketAddr>, tls: bool) -> std::io::Result<()> {
    let exe = std::env::current_exe().ok();
    let leo = exe
        .as_deref()
        .map(|p| command_name("leo", p))
        .unwrap_or_else(|| "leo".into());
    let sidecar = exe
        .as_deref()
        .and_then(Path::parent)
        .map(|dir| dir.join("leo-mcp"))
        .filter(|p| p.is_file());
    let leo_mcp = sidecar
        .as_deref()
        .map(|p| command_name("leo-mcp", p))
        .unwrap_or_else(|| "leo-mcp".into());
    let mut out = std::io::stdout().lock();
    let scheme = if tls { "https" } else { "http" };
    listeners(&mut out, home, tcp, scheme)?;
    if let Some(addr) = tcp.filter(|a| !tls && !a.ip().is_loopback()) {
        writeln!(
            out,
            "  WARNING: {addr} is reachable from other hosts without TLS: tokens and calls cross the network in clear (set web.tls: leo tls init)"
        )?;
    }
    let base = tcp
        .map(|a| format!("{scheme}://{a}"))
        .unwrap_or_else(|| "http://localhost".into());
    writeln!(out)?;
    writeln!(
        out,
        "Connect an app: any program as a tool, or the SDK (leo-app), or the HTTP API:"
    )?;
    writeln!(
        out,
        "  {leo} serve-tool --name NAME --description TEXT -- COMMAND ARGS…   (try it: {leo} call NAME '{{…}}')"
    )?;
    // With `leo tls init`'s CA the curl line trusts it, as every Leo client is told to.
    let cacert = match home.tls_ca() {
        ca if tls && ca.is_file() => format!("--cacert {} ", sh_quote(&ca.display().to_string())),
        _ => String::new(),
    };
    writeln!(
        out,
        "  curl -N {cacert}-H \"Authorization: Bearer $(cat {})\" '{base}/api/v1/events?client_tools=1'",
        sh_quote(&home.operator_token().display().to_string())
    )?;
    writeln!(out)?;
    let env = format!("LEO_HOME={}", sh_quote(&home.root.display().to_string()));
    writeln!(out, "Connect an agent (leo-mcp is the stdio MCP server):")?;
    for line in setup_lines(&env, &leo_mcp) {
        writeln!(out, "  {line}")?;
    }
    if sidecar.is_none() && find_on_path("leo-mcp").is_none() {
        writeln!(
            out,
            "  (leo-mcp is not built: cargo install --locked --path mcp-sidecar, from the checkout)"
        )?;
    }
    out.flush()
}

/// One line per harness: its label, then the command. `mcp list` then shows `leo` connected.
fn setup_lines(env: &str, leo_mcp: &str) -> [String; 4] {
    [
        format!(
            "Claude Code: claude mcp add --transport stdio --scope user leo -e {env} -- {leo_mcp} --agent claude"
        ),
        format!("codex:       codex mcp add leo --env {env} -- {leo_mcp} --agent codex"),
        format!("opencode:    opencode mcp add leo --env {env} -- {leo_mcp} --agent opencode"),
        "then `claude mcp list`, `codex mcp list` or `opencode mcp list` shows leo.".to_owned(),
    ]
}

fn listeners(
    out: &mut impl Write,
    home: &Home,
    tcp: Option<SocketAddr>,
    scheme: &str,
) -> std::io::Result<()> {
    match tcp {
        Some(addr) => writeln!(out, "leo broker listening on {scheme}://{addr}")?,
        None => writeln!(
            out,
            "leo broker listening (TCP disabled by web.enabled: false)"
        )?,
    }
    writeln!(out, "  unix socket:   {}", home.api_socket().display())?;
    writeln!(out, "  sidecar IPC:   {}", home.sidecar_socket().display())?;
    writeln!(
        out,
        "  app token:     {} (operator)",
        home.operator_token().display()
    )?;
    if let Some(addr) = tcp {
        writeln!(
            out,
            "  web console:   {scheme}://{addr}/ (log in with the operator token)"
        )?;
    }
    Ok(())
}

/// `name` when the shell finds this very file by that name, else the file's absolute path.
fn command_name(name: &str, file: &Path) -> String {
    let same = |a: &Path| {
        let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        canon(a) == canon(file)
    };
    match find_on_path(name) {
        Some(found) if same(&found) => name.to_owned(),
        _ => sh_quote(&file.display().to_string()),
    }
}

/// The first `name` on `PATH`, as the shell would find it.
pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// `s` as one shell word: as it is when that is safe, else in single quotes.
pub(crate) fn sh_quote(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+:@%,=~".contains(c);
    if !s.is_empty() && s.chars().all(safe) && !s.starts_with('~') {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_what_the_shell_would_split_or_expand() {
        assert_eq!(sh_quote("/home/me/.leo"), "/home/me/.leo");
        assert_eq!(sh_quote("/home/me/my leo"), "'/home/me/my leo'");
        assert_eq!(sh_quote("/a/it's"), "'/a/it'\\''s'");
        assert_eq!(sh_quote("~/x"), "'~/x'");
        assert_eq!(sh_quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn the_claude_line_names_the_server_before_its_env_option() {
        // `-e` takes several values: a name after it would be read as one more variable.
        let [claude, ..] = setup_lines("LEO_HOME=/h", "leo-mcp");
        assert_eq!(
            claude,
            "Claude Code: claude mcp add --transport stdio --scope user leo -e LEO_HOME=/h -- leo-mcp --agent claude"
        );
    }
}
