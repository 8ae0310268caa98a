//! The rules ARCHITECTURE.md states that a reading of the source can check: where wire types,
//! routes, HTTP, MCP and clap live, and that every crate's integration tests are one binary that
//! holds every test file. A rule broken here is broken in the map too; fix the code or the map.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// `dir` if it is a file, else every `.rs` file under it (relative to the repository), sorted.
fn sources(dir: &str) -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    let root = repo().join(dir);
    if root.is_dir() {
        walk(&root, &mut paths);
    } else {
        paths.push(root);
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("a source file");
            let rel = p.strip_prefix(repo()).expect("in the repository");
            (rel.display().to_string(), text)
        })
        .collect()
}

/// `file:line` of every line of `dirs` that `hit` matches, outside the files in `allowed`.
fn offenders(dirs: &[&str], allowed: &[&str], hit: impl Fn(&str) -> bool) -> Vec<String> {
    let mut found = Vec::new();
    for dir in dirs {
        for (path, text) in sources(dir) {
            if allowed.iter().any(|a| path.starts_with(a)) {
                continue;
            }
            for (n, line) in text.lines().enumerate() {
                if !line.trim_start().starts_with("//") && hit(line) {
                    found.push(format!("{path}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn only_protocol_defines_the_types_written_onto_the_wire() {
    let found = offenders(
        &["broker/src", "cli/src", "mcp-sidecar/src", "app-sdk/src"],
        // Not the wire: `leo status --json` on stdout, and a state file on disk.
        &[
            "cli/src/commands/snapshot.rs",
            "broker/src/webhooks/store.rs",
        ],
        |line| line.contains("derive(") && line.contains("Serialize"),
    );
    assert!(
        found.is_empty(),
        "a serialized type outside leo-protocol; move it there:\n{}",
        found.join("\n")
    );
}

#[test]
fn routes_are_declared_only_by_the_route_table() {
    let found = offenders(&["broker/src"], &["broker/src/http/mod.rs"], |line| {
        line.contains(".route(")
    });
    assert!(
        found.is_empty(),
        "a route outside http::mod's router:\n{}",
        found.join("\n")
    );
}

#[test]
fn only_the_sidecar_knows_rmcp() {
    let found = offenders(
        &["broker/src", "cli/src", "app-sdk/src", "protocol/src"],
        &[],
        |line| line.contains("rmcp"),
    );
    assert!(
        found.is_empty(),
        "rmcp outside leo-mcp:\n{}",
        found.join("\n")
    );
    for krate in ["broker", "cli", "app-sdk", "protocol"] {
        assert!(
            !dependencies(krate).contains("rmcp"),
            "{krate} depends on rmcp"
        );
    }
}

/// The `[dependencies]` section of `krate`'s manifest (not the dev-dependencies).
/// `file:line` of every line of `dirs` that contains one of `words`, outside `allowed`.
fn naming(dirs: &[&str], allowed: &[&str], words: &[&str]) -> Vec<String> {
    offenders(dirs, allowed, |line| words.iter().any(|w| line.contains(w)))
}

fn dependencies(krate: &str) -> String {
    let manifest = std::fs::read_to_string(repo().join(krate).join("Cargo.toml")).unwrap();
    manifest
        .split("\n[dependencies]")
        .nth(1)
        .map(|rest| rest.split("\n[").next().unwrap_or(rest))
        .unwrap_or_default()
        .to_owned()
}

/// The daemon's library is not the CLI: command-line parsing and the SDK's HTTP client are the
/// `leo-cli` crate's, so `leo-broker` depends on neither and names neither.
#[test]
fn the_daemon_library_knows_no_clap_and_no_sdk() {
    let deps = dependencies("broker");
    for name in ["clap", "leo-app"] {
        assert!(
            !deps.lines().any(|l| l.trim_start().starts_with(name)),
            "leo-broker depends on {name}; the CLI's parts belong in cli/"
        );
    }
    let found = naming(
        &["broker/src"],
        &[],
        &["clap::", "use clap", "leo_app::", "use leo_app"],
    );
    assert!(
        found.is_empty(),
        "clap or leo_app in the daemon's library:\n{}",
        found.join("\n")
    );
    // The one `leo` binary is the CLI crate's.
    let manifest = std::fs::read_to_string(repo().join("cli/Cargo.toml")).unwrap();
    assert!(
        manifest.contains("[[bin]]\nname = \"leo\""),
        "cli/ builds `leo`"
    );
    let manifest = std::fs::read_to_string(repo().join("broker/Cargo.toml")).unwrap();
    assert!(!manifest.contains("[[bin]]"), "leo-broker is a library");
}

/// The storage is a crate below the broker (`leo-store`): it depends on no part of the broker
/// (Cargo then refuses any import back up), and the live state is read back by one restore
/// for both databases, whose queries no other file repeats.
#[test]
fn the_store_is_below_the_broker_and_restores_in_one_place() {
    let deps = dependencies("store");
    for name in ["leo-broker", "leo-app", "axum", "hyper"] {
        assert!(
            !deps.lines().any(|l| l.trim_start().starts_with(name)),
            "leo-store depends on {name}; the storage stays below the broker"
        );
    }
    let allowed = ["store/src/read.rs", "store/src/tests.rs"];
    let queries = [
        "FROM live ORDER BY",
        "FROM clients ORDER BY",
        "FROM ended ORDER BY",
    ];
    let found = naming(&["store/src", "broker/src"], &allowed, &queries);
    assert!(
        found.is_empty(),
        "the state is restored by store/src/read.rs alone:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_core_and_its_state_machines_know_no_http() {
    let found = offenders(
        &[
            "broker/src/core",
            "store/src",
            "broker/src/history",
            "broker/src/ipc",
            "broker/src/registry.rs",
            "broker/src/requests.rs",
            "broker/src/ownership.rs",
            "broker/src/events.rs",
        ],
        &[],
        |line| {
            ["axum", "hyper", "http::"]
                .iter()
                .any(|w| line.contains(&format!("{w}::")) || line.contains(&format!("use {w}")))
        },
    );
    assert!(
        found.is_empty(),
        "HTTP below broker::http:\n{}",
        found.join("\n")
    );
}

/// Each crate with integration tests builds them as one binary, `tests/tests.rs`, and every
/// file in `tests/` is a module of it (a file left out would never run).
#[test]
fn every_crate_has_one_test_binary_that_holds_every_test_file() {
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|rest| rest.split(']').next())
        .expect("the workspace members");
    let mut with_tests = 0;
    for member in members.split(',').map(|m| m.trim().trim_matches('"')) {
        let dir = repo().join(member);
        let tests = dir.join("tests");
        if !tests.is_dir() {
            continue;
        }
        with_tests += 1;
        let cargo = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(
            cargo.contains("autotests = false"),
            "{member}: autotests must be off"
        );
        assert_eq!(
            cargo.matches("[[test]]").count(),
            1,
            "{member}: one [[test]]"
        );
        assert!(
            cargo.contains("path = \"tests/tests.rs\""),
            "{member}: the test binary is tests/tests.rs"
        );
        let root = std::fs::read_to_string(tests.join("tests.rs")).unwrap();
        for entry in std::fs::read_dir(&tests).unwrap() {
            let path = entry.unwrap().path();
            let Some(stem) = path
                .file_stem()
                .and_then(|s| s.to_str())
                .filter(|_| path.extension().is_some_and(|x| x == "rs"))
            else {
                continue;
            };
            if stem != "tests" {
                assert!(
                    root.lines().any(|l| l.trim() == format!("mod {stem};")),
                    "{member}/tests/{stem}.rs is not a module of tests/tests.rs, so it never runs"
                );
            }
        }
    }
    assert!(with_tests >= 5, "found {with_tests} crates with tests");
}

/// An instance reaches PostgreSQL through its one `Database` (one runtime thread, one pool,
/// the schema migrated once): no other file builds a runtime, a pool or a connection.
#[test]
fn the_database_is_reached_through_one_handle() {
    let found = offenders(
        &["broker/src", "store/src"],
        // SQLite's writer thread runs the one writer's loop on a runtime that only keeps its
        // clock: no pool, no connection to PostgreSQL.
        &["store/src/postgres/database.rs", "store/src/write.rs"],
        |line| {
            [
                "new_current_thread",
                "new_multi_thread",
                "Pool::builder",
                "Config::from_str",
            ]
            .iter()
            .any(|w| line.contains(w))
        },
    );
    assert!(
        found.is_empty(),
        "a runtime, pool or connection of its own beside store::postgres::Database:\n{}",
        found.join("\n")
    );
}

// The house drawn from the imports: every `use crate::…`, `use super::…` and inline
// `crate::…`/`super::…`/child-module path of a source file is an arrow to the file of the
// module it names. Test modules (`#[cfg(test)] mod …`, and files named `tests.rs` or `…_tests.rs`) are not drawn:
// a test may reach anywhere. The house is judged by its rooms: a top-level module (a file,
// or a directory of files whose `mod.rs` and children may import each other), or a
// module [`LAYERS`] names on its own (`cluster::gate`).

use std::collections::{BTreeMap, BTreeSet};

/// The library roots whose imports are drawn, each with the name its paths use for itself.
const HOUSES: &[&str] = &["broker/src", "store/src"];

/// The layers of the house, lowest first: a file may import its own layer and those below.
/// A module is in the layer of the longest prefix listed here.
const LAYERS: &[&[&str]] = &[
    // What everything may use: errors, refusals, names, a bounded fetch of a foreign URL.
    &[
        "error", "refusal", "lints", "suggest", "messages", "accept", "fetch",
    ],
    // The home: its layout, `config.yaml`, its state files and its token files.
    &["config", "home", "state_file", "tokens", "agent_tokens"],
    // The state machines.
    &[
        "registry",
        "requests",
        "ownership",
        "events",
        "offers",
        "oauth",
        "issuer",
    ],
    // The core that drives them, what it records of each call (`history`, over the storage
    // crate's backends) and what observes it (metrics, traces).
    &["core", "history", "metrics", "telemetry"],
    // The doors, and the leader's side of forwarding, which they read.
    &["http", "ipc", "webhooks", "cluster::gate"],
    // One core on its listeners.
    &["server"],
    // Several instances on one database.
    &["cluster"],
    // The choice between one broker and a cluster.
    &["daemon"],
];

/// How many arrows may run from a lower layer to a higher one.
const MAX_UPWARD: usize = 3;

/// Arrows not drawn yet, each with why: the general database helper that the cluster's tokens
/// still lend to the history and the webhooks (`cluster::tokens::on_database`), which goes
/// with the one database handle per instance. Only these module-to-module arrows are
/// skipped; any other arrow between the same rooms still counts.
const NOT_YET: &[(&str, &str)] = &[];

/// `a::b` for `src/a/b.rs` and `src/a/b/mod.rs`; `""` for `lib.rs`.
fn module_of(path: &str) -> String {
    let path = path.strip_suffix(".rs").unwrap_or(path);
    let path = path.strip_suffix("/mod").unwrap_or(path);
    if path == "lib" {
        String::new()
    } else {
        path.replace('/', "::")
    }
}

/// `text` without comments and without its inline test module (everything from a
/// `#[cfg(test)]` that opens a `mod … {`).
fn code_of(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let next = lines.get(i + 1).map_or("", |l| l.trim());
        if line.trim() == "#[cfg(test)]" && next.starts_with("mod ") && next.ends_with('{') {
            break;
        }
        let code = line.split("//").next().unwrap_or("");
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// The paths a `use` tree names: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn use_paths(tree: &str) -> Vec<String> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(&tree);
        return vec![path.trim().to_owned()];
    };
    let prefix = tree[..open].trim().trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut current) = (Vec::new(), 0, String::new());
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    parts.push(current);
    parts
        .iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| use_paths(p))
        .map(|p| match (prefix.is_empty(), p.as_str()) {
            (true, _) => p,
            (false, "self") => prefix.to_owned(),
            (false, _) => format!("{prefix}::{p}"),
        })
        .collect()
}

/// Every path of `code` that starts with `crate::`, `super::` or `self::`, or with an
/// identifier followed by `::` (a child module, when it is one), written out in full: the
/// trees of its `use` declarations (each begins a line) and the paths written inline.
fn paths_in(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        let declared = line
            .trim_start()
            .strip_prefix("pub")
            .map_or(line.trim_start(), |rest| {
                rest.trim_start_matches(|c: char| c != ' ').trim_start()
            });
        let Some(tree) = declared.strip_prefix("use ") else {
            found.extend(inline_paths(line));
            continue;
        };
        let mut tree = tree.to_owned();
        while !tree.contains(';') {
            let Some(more) = lines.next() else { break };
            tree.push_str(more);
        }
        found.extend(use_paths(tree.split(';').next().unwrap_or_default()));
    }
    found
}

/// The `a::b::c` runs of `code`, each as written.
fn inline_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if ident(bytes[i]) && (i == 0 || !ident(bytes[i - 1]) && bytes[i - 1] != b':') {
            let start = i;
            let mut end = i;
            loop {
                while end < bytes.len() && ident(bytes[end]) {
                    end += 1;
                }
                if code[end..].starts_with("::") && bytes.get(end + 2).is_some_and(|&b| ident(b)) {
                    end += 2;
                } else {
                    break;
                }
            }
            if code[start..end].contains("::") {
                found.push(code[start..end].to_owned());
            }
            i = end.max(i + 1);
        } else {
            i += 1;
        }
    }
    found
}

/// The import graph of `house` (`module -> modules it imports`), by module path.
fn import_graph(house: &str) -> BTreeMap<String, BTreeSet<String>> {
    let files: Vec<(String, String)> = sources(house)
        .into_iter()
        .map(|(path, text)| {
            let rel = path
                .strip_prefix(house)
                .unwrap_or(&path)
                .trim_start_matches('/');
            (rel.to_owned(), text)
        })
        .collect();
    let modules: BTreeSet<String> = files.iter().map(|(p, _)| module_of(p)).collect();
    let resolve = |segments: &[&str]| {
        (1..=segments.len())
            .rev()
            .map(|n| segments[..n].join("::"))
            .find(|m| modules.contains(m))
    };
    let mut graph = BTreeMap::new();
    for (path, text) in &files {
        let test = path.ends_with("tests.rs") || path.contains("/tests/");
        if path == "lib.rs" || test {
            continue;
        }
        let me = module_of(path);
        let parent: Vec<&str> = if path.ends_with("mod.rs") {
            me.split("::").collect()
        } else {
            me.split("::").collect::<Vec<_>>()[..me.matches("::").count()].to_vec()
        };
        let mut arrows = BTreeSet::new();
        for written in paths_in(&code_of(text)) {
            let mut segments: Vec<&str> = written.split("::").collect();
            let full: Vec<&str> = match segments[0] {
                "crate" => segments.split_off(1),
                "super" | "self" => {
                    let mut base = if segments[0] == "self" {
                        me.split("::").collect()
                    } else {
                        parent.clone()
                    };
                    let mut rest = &segments[1..];
                    while rest.first() == Some(&"super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                    base.extend_from_slice(rest);
                    base
                }
                // A child module of this file's module, if one is so named.
                child => {
                    let mut base: Vec<&str> = me.split("::").filter(|s| !s.is_empty()).collect();
                    if !path.ends_with("mod.rs") && me.is_empty() {
                        continue;
                    }
                    base.push(child);
                    if !modules.contains(&base.join("::")) {
                        continue;
                    }
                    base.extend_from_slice(&segments[1..]);
                    base
                }
            };
            let full: Vec<&str> = full.into_iter().filter(|s| *s != "self").collect();
            if let Some(target) = resolve(&full)
                && !target.is_empty()
                && target != me
            {
                arrows.insert(target);
            }
        }
        arrows.retain(|to| !NOT_YET.contains(&(me.as_str(), to.as_str())));
        graph.insert(me, arrows);
    }
    graph
}

/// The layer of `module`: the index in [`LAYERS`] of its longest listed prefix.
fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, names)| names.iter().map(move |n| (i, *n)))
        .filter(|(_, n)| module == *n || module.starts_with(&format!("{n}::")))
        .max_by_key(|(_, n)| n.len())
        .map(|(i, _)| i)
}

/// The room of `module`: the longest name of [`LAYERS`] it is in, else its top-level module.
fn room_of(module: &str) -> String {
    LAYERS
        .iter()
        .flat_map(|names| names.iter())
        .filter(|n| module == **n || module.starts_with(&format!("{n}::")))
        .max_by_key(|n| n.len())
        .map_or_else(
            || module.split("::").next().unwrap_or(module).to_owned(),
            |n| (*n).to_owned(),
        )
}

/// `graph` between rooms: an arrow for each import from one room into another.
fn between_rooms(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeMap<String, BTreeSet<String>> {
    let mut rooms: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in graph {
        let room = room_of(from);
        let arrows = rooms.entry(room.clone()).or_default();
        arrows.extend(to.iter().map(|t| room_of(t)).filter(|t| *t != room));
    }
    rooms
}

/// A circle of more than two rooms in `graph`, if there is one.
fn long_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn walk<'a>(
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        start: &'a str,
        path: &mut Vec<&'a str>,
        seen: &mut BTreeSet<&'a str>,
    ) -> bool {
        let here = path[path.len() - 1];
        for next in graph.get(here).into_iter().flatten() {
            if next == start && path.len() > 2 {
                return true;
            }
            // Each circle is found from its least module only.
            if next.as_str() > start && seen.insert(next.as_str()) {
                path.push(next);
                if walk(graph, start, path, seen) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    for start in graph.keys() {
        let (mut path, mut seen) = (vec![start.as_str()], BTreeSet::new());
        if walk(graph, start, &mut path, &mut seen) {
            return Some(path.into_iter().map(str::to_owned).collect());
        }
    }
    None
}

#[test]
fn the_import_graph_reads_use_trees_and_inline_paths() {
    assert_eq!(
        use_paths("crate::{a::b, c::{d, e as f}, g}"),
        ["crate::a::b", "crate::c::d", "crate::c::e", "crate::g"]
    );
    assert_eq!(
        use_paths("super::x::{self, Y}"),
        ["super::x", "super::x::Y"]
    );
    let code = "use crate::a::B;\nfn f() { crate::c::d(); lease::look(); x.y::<u8>() }";
    assert_eq!(
        paths_in(code),
        ["crate::a::B", "crate::c::d", "lease::look"]
    );
    let mut g = BTreeMap::new();
    g.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    g.insert(
        "b".to_owned(),
        BTreeSet::from(["a".to_owned(), "c".to_owned()]),
    );
    g.insert("c".to_owned(), BTreeSet::new());
    assert_eq!(
        long_circle(&g),
        None,
        "two files importing each other are allowed"
    );
    g.get_mut("c").unwrap().insert("a".to_owned());
    assert_eq!(long_circle(&g).unwrap(), ["a", "b", "c"]);
}

/// The house has no circle of more than two rooms, and at most [`MAX_UPWARD`] arrows run
/// from a lower layer (see [`LAYERS`]) to a higher one; every room has a layer.
#[test]
fn the_house_has_no_long_circle_and_few_arrows_up() {
    for house in HOUSES {
        if !repo().join(house).is_dir() {
            continue;
        }
        let graph = between_rooms(&import_graph(house));
        assert!(graph.len() > 5, "{house}: {} rooms", graph.len());
        if let Some(circle) = long_circle(&graph) {
            panic!("{house}: a circle of imports: {}", circle.join(" -> "));
        }
        if *house != "broker/src" {
            continue;
        }
        let unplaced: Vec<&String> = graph.keys().filter(|m| layer_of(m).is_none()).collect();
        assert!(
            unplaced.is_empty(),
            "rooms without a layer: {unplaced:?}; name each in LAYERS, under what it imports"
        );
        let upward: Vec<String> = graph
            .iter()
            .flat_map(|(from, to)| to.iter().map(move |t| (from, t)))
            .filter(|(from, to)| layer_of(to) > layer_of(from))
            .map(|(from, to)| format!("{from} -> {to}"))
            .collect();
        assert!(
            upward.len() <= MAX_UPWARD,
            "{} arrows run up (at most {MAX_UPWARD}):\n{}",
            upward.len(),
            upward.join("\n")
        );
    }
}

/// The crates that speak to a database: only the storage crate (`store/`) may name them.
const DATABASE_CRATES: &[&str] = &[
    "rusqlite",
    "tokio-postgres",
    "deadpool-postgres",
    "postgres-types",
    "sqlx",
];

/// The core depends on no database crate: Cargo, not a reading of the source, keeps SQL out
/// of `leo-broker`, which reaches its stores through `leo-store`.
#[test]
fn the_broker_depends_on_no_database_crate() {
    let deps = dependencies("broker");
    let named: Vec<&str> = DATABASE_CRATES
        .iter()
        .copied()
        .filter(|name| deps.lines().any(|l| l.trim_start().starts_with(name)))
        .collect();
    assert!(
        named.is_empty(),
        "leo-broker depends on {named:?}; the database is leo-store's"
    );
}

// Every PostgreSQL write passes the fence. A write statement runs on a `Tx`, which only
// `store::postgres::fence` makes: through `Fenced` (a transaction whose first statement is the
// fence) or `Unfenced` (a write made whoever leads, naming why). Cargo keeps anyone else from
// making one; this reading checks the rest: each write statement of the PostgreSQL code sits
// in a function that takes such a handle (or in a constant or a function whose every use
// does), and the unfenced writes are exactly those listed here.

/// A write handle, as a signature names it.
const WRITE_HANDLES: &[&str] = &["Fenced<", "Unfenced<", "Tx<"];

/// Tables written outside the fence, each by the one file that may: the lease's own rows
/// (taking the lease is what the fence checks against) and the schema's version (written by
/// the migration, under its lock).
const LEASE_TABLES: &[(&str, &str)] = &[
    ("cluster", "store/src/postgres/lease.rs"),
    ("instances", "store/src/postgres/lease.rs"),
    ("leo_schema", "store/src/postgres/schema.rs"),
];

/// Every write made whoever leads (`Unfenced`), as `file: function`, with why.
const UNFENCED_WRITES: &[(&str, &str)] = &[
    // `leo client|device|agent` audit their change on any host.
    (
        "store/src/history/postgres.rs: record",
        "the operator's command",
    ),
    // The first instance on a new database fills it, before any instance leads.
    ("store/src/postgres/tokens.rs: fill", "a new database"),
    // `leo client|device|agent add|remove` on any host.
    (
        "store/src/postgres/tokens.rs: insert",
        "the operator's command",
    ),
    (
        "store/src/postgres/tokens.rs: delete",
        "the operator's command",
    ),
];

/// The code of the PostgreSQL side: every library source of the storage and the broker but
/// SQLite's (a file that uses `rusqlite`) and the test files, as lines without comments.
fn postgres_code() -> Vec<(String, Vec<String>)> {
    ["store/src", "broker/src"]
        .iter()
        .flat_map(|dir| sources(dir))
        .filter(|(path, text)| {
            !text.contains("rusqlite")
                && !path.ends_with("tests.rs")
                && !path.ends_with("_tests.rs")
        })
        .map(|(path, text)| (path, code_of(&text).lines().map(str::to_owned).collect()))
        .collect()
}

/// The write statements of `lines`: the line each begins on, and the table it writes. A
/// statement is a string literal that begins with `INSERT INTO`, `UPDATE` or `DELETE FROM`,
/// or a `WITH` whose first part is one of those.
fn write_statements(lines: &[String]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        for (at, _) in line.match_indices('"') {
            let rest = &line[at + 1..];
            let rest = match rest.strip_prefix("WITH ") {
                Some(with) => match ["(INSERT INTO ", "(UPDATE ", "(DELETE FROM "]
                    .iter()
                    .filter_map(|k| with.find(k).map(|i| &with[i + 1..]))
                    .next()
                {
                    Some(inner) => inner,
                    None => continue,
                },
                None => rest,
            };
            let table = ["INSERT INTO ", "UPDATE ", "DELETE FROM "]
                .iter()
                .find_map(|k| rest.strip_prefix(k));
            if let Some(table) = table {
                let name: String = table
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || "_{}".contains(*c))
                    .collect();
                found.push((n, name));
            }
        }
    }
    found
}

/// The item (a `fn` or a `const`) the line `at` is in: the nearest one that begins above it.
fn holder(lines: &[String], at: usize) -> Option<usize> {
    (0..=at).rev().find(|&i| {
        let line = lines[i].trim_start();
        let t = ["pub(crate) ", "pub(super) ", "pub "]
            .iter()
            .find_map(|p| line.strip_prefix(p))
            .unwrap_or(line);
        let f = t
            .strip_prefix("const ")
            .filter(|r| r.starts_with("fn "))
            .unwrap_or(t);
        let f = f.strip_prefix("async ").unwrap_or(f);
        f.starts_with("fn ") || t.starts_with("const ")
    })
}

/// The item's name and its signature (its lines up to the body or the value).
fn item(lines: &[String], at: usize) -> (String, String) {
    let first = lines[at].trim_start();
    let name = first
        .split([' ', '(', ':', '<'])
        .skip_while(|w| *w != "fn" && *w != "const")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let constant = !first.contains("fn ");
    let mut signature = String::new();
    for line in &lines[at..] {
        signature.push_str(line);
        if constant || line.contains('{') {
            break;
        }
    }
    (name, signature)
}

/// Why the item at `at` may hold a write statement: it takes a write handle, or it is a
/// constant or function whose every use (in `lines`, to `depth` steps) is in one that does;
/// `Err` names the item that does not.
fn reaches_a_handle(lines: &[String], at: usize, depth: usize) -> Result<(), String> {
    let (name, signature) = item(lines, at);
    if WRITE_HANDLES.iter().any(|h| signature.contains(h)) {
        return Ok(());
    }
    let constant = !signature.contains("fn ");
    let word = |line: &str| {
        line.match_indices(name.as_str()).any(|(i, _)| {
            let before = line[..i].chars().last();
            let after = line[i + name.len()..].chars().next();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && (constant || after == Some('('))
        })
    };
    let uses: Vec<usize> = (0..lines.len())
        .filter(|&n| n != at && word(&lines[n]))
        .filter_map(|n| holder(lines, n))
        .filter(|&h| h != at)
        .collect();
    if depth == 0 || uses.is_empty() {
        return Err(name);
    }
    uses.iter()
        .try_for_each(|&h| reaches_a_handle(lines, h, depth - 1))
        .map_err(|e| format!("{name}, used by {e}"))
}

/// The offences of one file: write statements outside a handle, and tables of the lease
/// written elsewhere than their file.
fn unfenced_writes(path: &str, lines: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for (n, table) in write_statements(lines) {
        let at = format!("{path}:{}", n + 1);
        if let Some((_, file)) = LEASE_TABLES.iter().find(|(t, _)| *t == table) {
            if path != *file {
                found.push(format!("{at}: writes {table}, which only {file} may"));
            }
            continue;
        }
        match holder(lines, n).map(|h| reaches_a_handle(lines, h, 2)) {
            Some(Ok(())) => {}
            Some(Err(name)) => found.push(format!(
                "{at}: {table} is written in `{name}`, which takes no Fenced, Unfenced or Tx"
            )),
            None => found.push(format!("{at}: {table} is written outside any function")),
        }
    }
    found
}

#[test]
fn every_postgres_write_passes_the_fence() {
    // The reading finds what it is for: a write on a plain connection, and one through a
    // constant used by a function without a handle.
    let lines = |text: &str| text.lines().map(str::to_owned).collect::<Vec<_>>();
    let sloppy = lines(
        "const GONE: &str = \"DELETE FROM webhooks\";\n\
         async fn forget(client: &Client) {\n    client.execute(GONE, &[]).await;\n}\n\
         pub async fn add(client: &Client) {\n    client.execute(\"INSERT INTO tokens (a) VALUES ($1)\", &[]).await;\n}\n\
         async fn fenced(tx: &Fenced<'_>) {\n    tx.execute(\"UPDATE mail SET a = 1\", &[]).await;\n}\n\
         async fn lease(c: &Client) {\n    c.execute(\"WITH gone AS (UPDATE cluster SET leader = NULL) SELECT 1\", &[]).await;\n}",
    );
    let caught = unfenced_writes("x.rs", &sloppy);
    assert_eq!(caught.len(), 3, "{caught:#?}");
    assert!(
        caught[0].contains("GONE") && caught[1].contains("`add`"),
        "{caught:#?}"
    );
    assert!(
        caught[2].contains("only store/src/postgres/lease.rs"),
        "{caught:#?}"
    );

    let code = postgres_code();
    let mut statements = 0;
    let mut found = Vec::new();
    let mut unfenced = Vec::new();
    for (path, lines) in &code {
        statements += write_statements(lines).len();
        found.extend(unfenced_writes(path, lines));
        for (n, line) in lines.iter().enumerate() {
            if line.contains("Unfenced::on(") || line.contains("Unfenced::within(") {
                let name = holder(lines, n)
                    .map(|h| item(lines, h).0)
                    .unwrap_or_default();
                unfenced.push(format!("{path}: {name}"));
            }
        }
    }
    assert!(
        statements >= 25,
        "the reading found only {statements} write statements"
    );
    assert!(
        found.is_empty(),
        "a PostgreSQL write that may bypass the fence; run it on the handle \
         Database::fenced gives:\n{}",
        found.join("\n")
    );
    unfenced.sort();
    let mut listed: Vec<&str> = UNFENCED_WRITES.iter().map(|(w, _)| *w).collect();
    listed.sort();
    assert_eq!(
        unfenced, listed,
        "the writes made whoever leads (Unfenced) are not the ones listed; a leader's write \
         goes through the fence"
    );
}

// No blocking database call on the runtime thread. A call that waits for the database's
// thread (`Database::blocking`, `Database::block_on`), for the store's writer
// (`Store::committed_blocking`, and `Store::open_postgres`, which waits for the restore), or
// a runtime's `block_on`, blocks the thread it runs on: every one is made in a function listed
// here with the thread it runs on, none of them the broker's runtime. A new one fails this
// until it is listed, with its thread.

/// The calls that block their thread.
const BLOCKING_CALLS: &[&str] = &[
    ".blocking(",
    ".block_on(",
    "committed_blocking(",
    "blocking_recv(",
    "Store::open_postgres(",
];

/// Every function that makes a blocking call, as `file: function`, with the thread it runs on.
const BLOCKING_PLACES: &[(&str, &str)] = &[
    (
        "broker/src/cluster/instance.rs: take",
        "a blocking-pool thread (spawn_blocking)",
    ),
    (
        "broker/src/cluster/tokens.rs: add",
        "a `leo` command, which runs no runtime",
    ),
    ("broker/src/cluster/tokens.rs: list", "a `leo` command"),
    (
        "broker/src/cluster/tokens.rs: prepare",
        "`leo serve` before its runtime starts",
    ),
    ("broker/src/cluster/tokens.rs: remove", "a `leo` command"),
    (
        "broker/src/cluster/tokens.rs: rotate_key",
        "a `leo` command",
    ),
    (
        "broker/src/core/mod.rs: committed_blocking",
        "the history's writer thread",
    ),
    (
        "broker/src/core/mod.rs: new",
        "the history's writer thread (after_commits)",
    ),
    (
        "store/src/history/postgres.rs: on",
        "the history's writer thread (leo-history-pg)",
    ),
    ("store/src/history/postgres.rs: record", "a `leo` command"),
    (
        "store/src/lib.rs: committed_blocking",
        "its callers' (above)",
    ),
    (
        "store/src/postgres/database.rs: block_on",
        "its callers' (above)",
    ),
    (
        "store/src/postgres/database.rs: open",
        "the database's own thread (leo-database)",
    ),
    (
        "store/src/write.rs: spawn",
        "the SQLite writer's own thread (leo-store)",
    ),
];

#[test]
fn no_blocking_database_call_on_the_runtime_thread() {
    let mut places = BTreeSet::new();
    for dir in ["broker/src", "store/src"] {
        for (path, text) in sources(dir) {
            if path.ends_with("tests.rs") || path.ends_with("_tests.rs") {
                continue;
            }
            let lines: Vec<String> = code_of(&text).lines().map(str::to_owned).collect();
            assert!(
                !lines.iter().any(|l| l.contains("fn on_database")),
                "{path}: a general database helper beside Database"
            );
            for (n, line) in lines.iter().enumerate() {
                if BLOCKING_CALLS.iter().any(|c| line.contains(c)) {
                    let name = holder(&lines, n).map(|h| item(&lines, h).0);
                    places.insert(format!("{path}: {}", name.unwrap_or_default()));
                }
            }
        }
    }
    let listed: BTreeSet<String> = BLOCKING_PLACES.iter().map(|(p, _)| p.to_string()).collect();
    assert_eq!(
        places, listed,
        "the functions that block their thread on the database are not the ones listed; run \
         the call on the database's runtime (Database::run, awaited), or list it with the \
         thread it runs on, which is never the broker's runtime"
    );
    // `leo serve` prepares (the cluster's tokens, waited for) before its runtime runs.
    let serve = code_of(&std::fs::read_to_string(repo().join("cli/src/broker.rs")).unwrap());
    let prepared = serve.find("daemon::prepare(").expect("leo serve prepares");
    let runs = serve
        .find(".block_on(")
        .expect("leo serve runs its runtime");
    assert!(prepared < runs, "leo serve prepares inside its runtime");
}
