//! Shell completions and man pages, generated from the clap definitions: the bash script of
//! `leo` and of `leo-mcp` loads in `bash -n`, and `leo`'s completes a subcommand when bash runs
//! it as it would on Tab; zsh and fish scripts name the commands; the man pages are written.

use std::process::Command;

use leo_testkit::bin;

fn output(program: &str, args: &[&str]) -> String {
    let out = Command::new(bin(program)).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What `_leo` puts in COMPREPLY for the words typed so far.
fn complete(script: &std::path::Path, words: &str) -> Vec<String> {
    let cword = words.split(' ').count() - 1;
    let prog = format!(
        "source '{}'\nCOMP_WORDS=({words})\nCOMP_CWORD={cword}\nCOMP_LINE='{words}'\nCOMP_POINT=${{#COMP_LINE}}\n_leo leo \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        script.display()
    );
    let out = Command::new("bash").arg("-c").arg(&prog).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_bash_completion_loads_and_completes_subcommands() {
    let dir = tempfile::tempdir().unwrap();
    for (program, args) in [
        ("leo", &["completions", "bash"][..]),
        ("leo-mcp", &["--completions", "bash"][..]),
    ] {
        let script = dir.path().join(program);
        std::fs::write(&script, output(program, args)).unwrap();
        let check = Command::new("bash")
            .arg("-n")
            .arg(&script)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "{program}: bash -n: {}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
    let script = dir.path().join("leo");
    assert_eq!(complete(&script, "leo bro"), ["broker"]);
    let all = complete(&script, "leo ''");
    for command in ["broker", "doctor", "service", "completions", "status"] {
        assert!(all.iter().any(|w| w == command), "{command}: {all:?}");
    }
    let service = complete(&script, "leo service ''");
    for sub in ["install", "uninstall", "status"] {
        assert!(service.iter().any(|w| w == sub), "{sub}: {service:?}");
    }
}

#[test]
fn zsh_and_fish_scripts_and_the_man_pages_are_generated() {
    for shell in ["zsh", "fish"] {
        let script = output("leo", &["completions", shell]);
        assert!(
            script.contains("doctor") && script.contains("service"),
            "{shell}:\n{script}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    output("leo", &["man", "--out", out]);
    output("leo-mcp", &["--man", out]);
    for page in [
        "leo.1",
        "leo-broker.1",
        "leo-doctor.1",
        "leo-service-install.1",
        "leo-mcp.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(page))
            .unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(
            text.starts_with(".ie") || text.contains(".TH"),
            "{page}:\n{text}"
        );
    }
    let mcp = std::fs::read_to_string(dir.path().join("leo-mcp.1")).unwrap();
    assert!(mcp.contains("agent"), "{mcp}");
}
