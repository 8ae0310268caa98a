//! The modes of `$LEO_HOME`'s private files: its directories and tokens readable by their owner
//! alone, the sockets not open to others, `config.yaml` writable by its owner alone. The broker
//! refuses to start on a loose token or config; here the same rules are said before it has to.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use leo_broker::home::Home;

use super::{Check, Status};

const AREA: &str = "files";

/// What a file must keep from its group and others, and the command that makes it so.
struct Rule {
    /// Mode bits that must be clear.
    forbidden: u32,
    chmod: &'static str,
    what: &'static str,
}

const PRIVATE_DIR: Rule = Rule {
    forbidden: 0o077,
    chmod: "chmod 700",
    what: "a private directory",
};
const SECRET: Rule = Rule {
    forbidden: 0o077,
    chmod: "chmod 600",
    what: "a token",
};
const SOCKET: Rule = Rule {
    forbidden: 0o077,
    chmod: "chmod 600",
    what: "a socket",
};
const CONFIG: Rule = Rule {
    forbidden: 0o022,
    chmod: "chmod go-w",
    what: "the config (it grants API client scopes)",
};

pub fn modes(home: &Home, checks: &mut Vec<Check>) {
    if !home.root.exists() {
        checks.push(Check::new(AREA, "home", Status::Info).detail(format!(
            "{} does not exist: no broker has run with this LEO_HOME",
            home.root.display()
        )));
        return;
    }
    let mut bad = 0;
    let mut seen = 0;
    let mut check = |path: PathBuf, rule: &Rule| {
        let Some(c) = one(&path, rule) else {
            return;
        };
        seen += 1;
        if c.status == Status::Fail {
            bad += 1;
            checks.push(c);
        }
    };
    for dir in [home.root.clone(), home.state(), home.run()] {
        check(dir, &PRIVATE_DIR);
    }
    check(home.config(), &CONFIG);
    for token in tokens(home) {
        check(token, &SECRET);
    }
    for socket in ["leo.sock", "sidecar.sock"] {
        check(home.run().join(socket), &SOCKET);
    }
    if bad == 0 {
        checks.push(Check::new(AREA, "modes", Status::Ok).detail(format!(
            "{seen} directories, tokens, sockets and config files, none open to others"
        )));
    }
}

/// Every token file: the operator's, the shared agent token, and each agent's, client's and
/// device's own.
fn tokens(home: &Home) -> Vec<PathBuf> {
    let mut all = vec![home.operator_token(), home.agent_token()];
    for dir in [home.agents(), home.clients(), home.devices()] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "token"))
            .collect();
        found.sort();
        all.extend(found);
    }
    all
}

/// The check of one path, `None` when it does not exist.
fn one(path: &Path, rule: &Rule) -> Option<Check> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let mode = meta.permissions().mode() & 0o777;
    let kind = if meta.file_type().is_socket() {
        "socket"
    } else if meta.is_dir() {
        "directory"
    } else {
        "file"
    };
    if mode & rule.forbidden == 0 {
        return Some(Check::new(AREA, path.display().to_string(), Status::Ok));
    }
    Some(
        Check::new(AREA, path.display().to_string(), Status::Fail)
            .detail(format!(
                "{kind} mode is {mode:04o}; {} must not be open to its group or others",
                rule.what
            ))
            .fix(format!("{} {}", rule.chmod, path.display())),
    )
}
