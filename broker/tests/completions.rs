//! Shell completions and man pages, generated from the clap definitions: the bash script of
//! `leo` and of `leo-mcp` loads in `bash -n`, and `leo`'s completes a subcommand when bash runs
//! it as it would on Tab; zsh and fish scripts name the commands; the man pages are written.

use std::process::Command;

use leo_testkit::bin;

/// `program args`, with the variables a user's shell may hold set (`LEO_HOME` among them):
/// what is generated from the flags alone must not depend on them.
fn output(program: &str, args: &[&str]) -> String {
    let out = Command::new(bin(program))
        .args(args)
        .env("LEO_HOME", std::env::temp_dir())
        .env("LEO_AGENT", "claude")
        .env("LEO_URL", "http://127.0.0.1:1")
        .output()
        .unwrap();
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

/// `--help` names each variable a flag reads, and shows no empty value for one that is unset
/// (`[env: LEO_URL=]`) nor the value of one that is set.
#[test]
fn help_names_the_variables_without_their_values() {
    for (program, vars) in [
        ("leo", &["LEO_URL", "LEO_TOKEN_FILE", "LEO_HOME"][..]),
        (
            "leo-mcp",
            &["LEO_URL", "LEO_AGENT_TOKEN_FILE", "LEO_AGENT", "LEO_HOME"],
        ),
    ] {
        let mut cmd = Command::new(bin(program));
        cmd.arg("--help");
        for var in vars {
            cmd.env_remove(var);
        }
        let out = cmd.output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        for var in vars {
            assert!(
                help.contains(&format!("[env: {var}]")),
                "{program}: {var}\n{help}"
            );
        }
        assert!(!help.contains("=]"), "{program}:\n{help}");
        let set = output(program, &["--help"]);
        assert!(!set.contains("127.0.0.1:1"), "{program}:\n{set}");
    }
}
