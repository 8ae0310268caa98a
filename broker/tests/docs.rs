//! The documentation stands alone: every relative link of the README, ARCHITECTURE.md and
//! `docs/` resolves to a file of this repository (and to a heading, when it names one), nothing
//! points outside the repository, and the text users read (those pages, the other READMEs, the
//! web console's assets, every `--help`) speaks of the product only.
//!
//! Links are read the way a Markdown renderer reads them: `[text](target)` outside code blocks
//! and code spans; anchors are GitHub's heading slugs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use leo_testkit::bin;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// README.md, ARCHITECTURE.md and every page under docs/, relative to the repository.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![PathBuf::from("README.md"), PathBuf::from("ARCHITECTURE.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("a docs/ folder")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .map(|p| {
            p.strip_prefix(repo())
                .expect("under the repository")
                .to_path_buf()
        })
        .collect();
    docs.sort();
    assert!(
        docs.iter().any(|p| p.ends_with("protocol.md")),
        "docs/protocol.md is missing"
    );
    pages.extend(docs);
    pages
}

/// The page without fenced code blocks, indented code lines and code spans (which may run
/// over a line break, not past a paragraph).
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    let mut in_code = false;
    for line in text.lines() {
        if line.trim().is_empty() {
            in_code = false;
        }
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if fenced || (line.starts_with("    ") && !in_code) {
            out.push('\n');
            continue;
        }
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// The targets of `[text](target)` links in `text`.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut found = Vec::new();
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        match after.find(')') {
            Some(end) => {
                found.push(after[..end].trim().to_owned());
                rest = &after[end..];
            }
            None => break,
        }
    }
    found
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor a Markdown page defines (repeated headings get `-1`, `-2`…).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `base/rel` with `.` and `..` applied, without touching the file system; `None` when it
/// climbs above the repository.
fn join_inside(base: &Path, rel: &str) -> Option<PathBuf> {
    let mut parts: Vec<Component> = base.components().collect();
    for c in Path::new(rel).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(_) => parts.push(c),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// What is wrong with one link of `page`, if anything.
fn check_link(page: &Path, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("an empty link".into());
    }
    if target.contains("://") || target.starts_with("mailto:") {
        return Some(format!("{target}: points outside the repository"));
    }
    if target.starts_with('/') {
        return Some(format!("{target}: an absolute path"));
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let dir = page.parent().unwrap_or(Path::new(""));
    let file = if path.is_empty() {
        page.to_path_buf()
    } else {
        match join_inside(dir, path) {
            Some(f) => f,
            None => return Some(format!("{target}: leaves the repository")),
        }
    };
    let full = repo().join(&file);
    if !full.exists() {
        return Some(format!("{target}: {} does not exist", file.display()));
    }
    if let Some(anchor) = anchor {
        if full.extension().is_none_or(|x| x != "md") {
            return Some(format!(
                "{target}: an anchor into a file that is not a page"
            ));
        }
        let text = std::fs::read_to_string(&full).expect("a page");
        if !anchors(&text).contains(anchor) {
            return Some(format!(
                "{target}: {} has no heading #{anchor}",
                file.display()
            ));
        }
    }
    None
}

#[test]
fn every_link_of_the_docs_resolves_inside_the_repository() {
    let mut faults = Vec::new();
    let mut count = 0;
    for page in pages() {
        let text = std::fs::read_to_string(repo().join(&page)).expect("a page");
        for target in links(&text) {
            count += 1;
            if let Some(fault) = check_link(&page, &target) {
                faults.push(format!("{}: {fault}", page.display()));
            }
        }
    }
    assert!(faults.is_empty(), "broken links:\n{}", faults.join("\n"));
    // The README links every page of docs/, and the protocol reference its fixtures.
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let linked: BTreeSet<String> = links(&readme).into_iter().collect();
    for page in pages().iter().filter(|p| p.starts_with("docs")) {
        let target = page.display().to_string();
        assert!(linked.contains(&target), "README.md does not link {target}");
    }
    let protocol = std::fs::read_to_string(repo().join("docs/protocol.md")).expect("protocol.md");
    let fixtures: Vec<String> = links(&protocol)
        .into_iter()
        .filter(|l| l.starts_with("../testdata/wire/"))
        .collect();
    assert!(
        fixtures.len() >= 40,
        "protocol.md links {} fixtures",
        fixtures.len()
    );
    assert!(
        count > 100,
        "only {count} links found: is the parser reading the pages?"
    );
}

/// The worked example of docs/approvals.md shows the phone app's code as it is in
/// `sdks/python/examples/phone_approver.py`, which mypy and ruff check and the Python SDK's
/// suite runs (`test_the_phone_approver_example_decides_as_the_person_answers`).
#[test]
fn the_approvals_worked_example_is_the_tested_example() {
    let page = std::fs::read_to_string(repo().join("docs/approvals.md")).expect("approvals.md");
    let example = std::fs::read_to_string(repo().join("sdks/python/examples/phone_approver.py"))
        .expect("the example");
    let shown = page
        .split("```python\n")
        .filter_map(|block| block.split("```").next())
        .any(|code| code == example);
    assert!(
        shown,
        "docs/approvals.md does not show sdks/python/examples/phone_approver.py as it is"
    );
}

/// Every fixture in testdata/wire/ is linked from the protocol reference.
#[test]
fn the_protocol_reference_links_every_wire_fixture() {
    let protocol = std::fs::read_to_string(repo().join("docs/protocol.md")).expect("protocol.md");
    let linked: BTreeSet<String> = links(&protocol).into_iter().collect();
    let mut missing = Vec::new();
    for kind in ["http", "events", "ipc", "console", "webhooks"] {
        let dir = repo().join("testdata/wire").join(kind);
        for entry in std::fs::read_dir(&dir).expect("a fixture folder") {
            let name = entry.expect("an entry").file_name();
            let target = format!("../testdata/wire/{kind}/{}", name.to_string_lossy());
            if !linked.contains(&target) {
                missing.push(target);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not linked from docs/protocol.md:\n{}",
        missing.join("\n")
    );
}

/// Words that belong to how the project was made, not to the product.
fn foreign_words(text: &str, forbid_spec: bool) -> Vec<String> {
    let mut found = Vec::new();
    for needle in ["SPEC.md", "../shared", "shared/"] {
        if text.contains(needle) {
            found.push(needle.to_owned());
        }
    }
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '='))
        .collect();
    for w in words {
        let w = w.trim_matches('-');
        // libFuzzer's `-seed=1` flag is a fuzzing term, not a reference.
        if w.starts_with("seed=") {
            continue;
        }
        if w == "seed" || w == "seeds" || (forbid_spec && (w == "spec" || w == "specs")) {
            found.push(w.to_owned());
        }
    }
    found
}

fn help_texts() -> Vec<(String, String)> {
    let leo = bin("leo");
    let mcp = bin("leo-mcp");
    let commands: &[&[&str]] = &[
        &[],
        &["broker"],
        &["client"],
        &["client", "add"],
        &["client", "list"],
        &["client", "rm"],
        &["device"],
        &["device", "pair"],
        &["device", "list"],
        &["device", "rm"],
        &["status"],
        &["requests"],
        &["call"],
        &["serve-tool"],
        &["webhook"],
        &["webhook", "add"],
        &["webhook", "list"],
        &["webhook", "rm"],
        &["service"],
        &["service", "install"],
        &["service", "uninstall"],
        &["service", "status"],
        &["doctor"],
        &["completions"],
    ];
    let mut out = Vec::new();
    for args in commands {
        let o = std::process::Command::new(&leo)
            .args(*args)
            .arg("--help")
            .output()
            .expect("leo --help");
        assert!(o.status.success(), "leo {args:?} --help failed");
        out.push((
            format!("leo {} --help", args.join(" ")),
            String::from_utf8_lossy(&o.stdout).into_owned(),
        ));
    }
    let o = std::process::Command::new(&mcp)
        .arg("--help")
        .output()
        .expect("leo-mcp --help");
    assert!(o.status.success(), "leo-mcp --help failed");
    out.push((
        "leo-mcp --help".into(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    ));
    out
}

#[test]
fn user_facing_text_speaks_of_the_product_only() {
    let mut texts: Vec<(String, String, bool)> = Vec::new();
    let mut faults = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(repo().join(&page)).expect("a page");
        if text.contains("/work/") {
            faults.push(format!("{}: names a path of one machine", page.display()));
        }
        // ARCHITECTURE.md names code, such as serve-tool's `spec` module.
        let forbid_spec = page != Path::new("ARCHITECTURE.md");
        texts.push((page.display().to_string(), text, forbid_spec));
    }
    for other in [
        "bench/README.md",
        "bench/results.md",
        "examples/python/README.md",
        "sdks/python/README.md",
        "sdks/typescript/README.md",
    ] {
        let text = std::fs::read_to_string(repo().join(other)).expect(other);
        texts.push((other.to_owned(), text, true));
    }
    let assets = repo().join("broker/assets/console");
    for entry in std::fs::read_dir(&assets).expect("the console's assets") {
        let path = entry.expect("an asset").path();
        if let Ok(text) = std::fs::read_to_string(&path) {
            texts.push((path.display().to_string(), text, true));
        }
    }
    for (name, text) in help_texts() {
        texts.push((name, text, true));
    }
    for (name, text, forbid_spec) in &texts {
        let found = foreign_words(text, *forbid_spec);
        if !found.is_empty() {
            faults.push(format!("{name}: {found:?}"));
        }
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

#[test]
fn the_checks_catch_what_they_are_for() {
    // A test that cannot fail is a defect: each check, on text that breaks it.
    assert_eq!(slug("`GET /api/v1/events`"), "get-apiv1events");
    assert_eq!(
        slug("`leo status` and `leo requests`"),
        "leo-status-and-leo-requests"
    );
    let page = Path::new("docs/x.md");
    assert!(check_link(page, "../../shared/SPEC.md").is_some());
    assert!(check_link(page, "../no-such-file.md").is_some());
    assert!(check_link(page, "/etc/passwd").is_some());
    assert!(check_link(page, "https://example.com/").is_some());
    assert!(check_link(page, "protocol.md#no-such-heading").is_some());
    assert!(check_link(page, "protocol.md#routes").is_none());
    assert!(check_link(Path::new("README.md"), "docs/protocol.md").is_none());
    assert_eq!(
        links("see [a](b.md) and `[c](d)`\n```\n[e](f)\n```\n"),
        ["b.md"]
    );
    assert_eq!(
        links("a `code\nspan` then [g](h.md)\n\n    [i](j)\n"),
        ["h.md"]
    );
    assert!(!foreign_words("the seed 001 says", true).is_empty());
    assert!(!foreign_words("see ../shared/SPEC.md", false).is_empty());
    assert!(!foreign_words("where the spec is silent", true).is_empty());
    assert!(foreign_words("libFuzzer -seed=1, a specific inspector", true).is_empty());
}
