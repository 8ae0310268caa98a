//! `leo service`: the unit and the plist as written, checked by `systemd-analyze verify` and as
//! plist XML against the structure of Apple's plist DTD; the commands `--dry-run` prints; the
//! messages and exit codes of installing twice, uninstalling nothing, a manager that fails and
//! no manager at all. Each runs with `HOME` in a temp dir. `systemctl` and `launchctl` are the
//! first found on `PATH`: a script of the test's stands in for them, logging its arguments, as
//! this machine runs no user service manager (the macOS side is tested by its generated file).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use leo_testkit::{bin, require};

/// A temp `HOME` with a `bin/` on `PATH` holding stand-ins for the service managers.
struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    /// `systemctl` and `launchctl` log their arguments to `HOME/manager.log`, then exit 0, or
    /// 1 when the arguments contain `fail_on`.
    fn new(fail_on: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let bin_dir = dir.path().join("bin");
        std::fs::create_dir_all(&bin_dir).unwrap();
        let log = dir.path().join("manager.log");
        for name in ["systemctl", "launchctl"] {
            let script = format!(
                "#!/bin/sh\necho \"{name} $*\" >> '{}'\ncase \"$*\" in *'{fail_on}'*) echo 'Failed to connect to bus: No medium found' >&2; exit 1;; esac\nexit 0\n",
                log.display()
            );
            let path = bin_dir.join(name);
            std::fs::write(&path, script).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Setup { dir }
    }

    fn home(&self) -> &Path {
        self.dir.path()
    }

    /// `LEO_HOME`: a name XML and systemd must both escape.
    fn leo_home(&self) -> PathBuf {
        self.home().join("leo & <home> 100%")
    }

    fn leo(&self, args: &[&str]) -> Output {
        self.leo_with(args, &[])
    }

    /// `leo` with `env` added to its environment.
    fn leo_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(bin("leo"))
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .env("HOME", self.home())
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", self.home().join("bin").display()),
            )
            .env("LEO_HOME", self.leo_home())
            .output()
            .unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.home().join("manager.log")).unwrap_or_default()
    }

    fn unit(&self) -> PathBuf {
        self.home().join(".config/systemd/user/leo.service")
    }

    fn plist(&self) -> PathBuf {
        self.home().join("Library/LaunchAgents/leo.broker.plist")
    }
}

fn text(o: &Output) -> (i32, String, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn leo_exe() -> String {
    std::fs::canonicalize(bin("leo"))
        .unwrap()
        .display()
        .to_string()
}

/// Only the file itself in its directory: no temp file left behind.
fn alone_in_dir(file: &Path) {
    let names: Vec<String> = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [file.file_name().unwrap().to_string_lossy()],
        "{names:?}"
    );
}

/// `systemd-analyze verify` passes the unit at `path` (`unit`, its text) without a remark.
fn verify_unit(path: &Path, unit: &str) {
    let verify = Command::new(require::SYSTEMD_ANALYZE)
        .arg("verify")
        .arg(path)
        .output()
        .unwrap();
    let (code, vout, verr) = text(&verify);
    assert_eq!(
        code, 0,
        "systemd-analyze verify:\n{vout}{verr}\n--- unit\n{unit}"
    );
    assert!(
        !verr.contains("leo.service:"),
        "systemd-analyze has remarks:\n{verr}"
    );
}

#[test]
fn the_systemd_unit_as_written_passes_systemd_analyze_and_a_second_install_is_refused() {
    if !require::systemd_analyze() {
        return;
    }
    let s = Setup::new("never");
    let (code, out, err) = text(&s.leo(&["service", "install", "--manager", "systemd"]));
    assert_eq!(code, 0, "{out}{err}");
    let unit = std::fs::read_to_string(s.unit()).unwrap();
    assert!(
        unit.contains(&format!("ExecStart=\"{}\" broker", leo_exe())),
        "{unit}"
    );
    assert!(
        unit.contains(&format!(
            "Environment=\"LEO_HOME={}\"",
            s.leo_home().display().to_string().replace('%', "%%")
        )),
        "{unit}"
    );
    assert!(unit.contains("Restart=on-failure") && unit.contains("WantedBy=default.target"));
    alone_in_dir(&s.unit());
    assert_eq!(
        s.log(),
        "systemctl --user show-environment\nsystemctl --user daemon-reload\nsystemctl --user enable --now leo.service\n"
    );
    verify_unit(&s.unit(), &unit);

    let (code, _, err) = text(&s.leo(&["service", "install", "--manager", "systemd"]));
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("already installed") && err.contains("leo service uninstall"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(s.unit()).unwrap(), unit);

    let (code, out, err) = text(&s.leo(&["service", "uninstall", "--manager", "systemd"]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(!s.unit().exists());
    assert!(s.log().ends_with(
        "systemctl --user show-environment\nsystemctl --user disable --now leo.service\nsystemctl --user daemon-reload\n"
    ), "{}", s.log());
    let (code, _, err) = text(&s.leo(&["service", "uninstall", "--manager", "systemd"]));
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("not installed"), "{err}");
    let (code, out, _) = text(&s.leo(&["service", "status", "--manager", "systemd"]));
    assert_eq!(code, 3, "{out}");
    assert!(
        out.contains("service: not installed") && out.contains("broker:  broker not running"),
        "{out}"
    );
}

#[test]
fn without_a_user_service_manager_it_says_so_prints_the_foreground_command_and_writes_nothing() {
    let s = Setup::new("show-environment");
    let (code, out, err) = text(&s.leo(&["service", "install", "--manager", "systemd"]));
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("no systemd user manager here") && err.contains("Failed to connect to bus"),
        "{err}"
    );
    assert!(
        err.contains(&format!("{} broker", leo_exe())) && err.contains("LEO_HOME='"),
        "{err}"
    );
    assert!(!s.unit().exists());
    assert!(!s.unit().parent().unwrap().exists());
}

#[test]
fn a_manager_that_refuses_the_unit_leaves_no_unit_behind() {
    let s = Setup::new("enable");
    let (code, out, err) = text(&s.leo(&["service", "install", "--manager", "systemd"]));
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("systemctl --user enable --now leo.service")
            && err.contains("nothing installed"),
        "{err}"
    );
    assert!(!s.unit().exists());
    // So a second try is a fresh install, not "already installed".
    let (code, _, err) = text(&s.leo(&["service", "install", "--manager", "systemd"]));
    assert_eq!(code, 1, "{err}");
    assert!(!err.contains("already installed"), "{err}");
}

/// The `$ command` lines of a dry run.
fn commands(out: &str) -> Vec<&str> {
    out.lines().filter_map(|l| l.strip_prefix("$ ")).collect()
}

#[test]
fn dry_run_prints_the_file_and_the_commands_and_changes_nothing() {
    let s = Setup::new("never");
    let (code, out, err) =
        text(&s.leo(&["service", "install", "--dry-run", "--manager", "systemd"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!(
            "would write {}:\n# Written by",
            s.unit().display()
        )),
        "{out}"
    );
    assert_eq!(
        commands(&out),
        [
            "systemctl --user daemon-reload",
            "systemctl --user enable --now leo.service"
        ]
    );
    let uid = nix::unistd::getuid();
    let (code, out, err) =
        text(&s.leo(&["service", "install", "--dry-run", "--manager", "launchd"]));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!(
            "would create {}",
            s.home().join("Library/Logs/leo").display()
        )),
        "{out}"
    );
    assert_eq!(
        commands(&out),
        [format!(
            "launchctl bootstrap gui/{uid} {}",
            s.plist().display()
        )]
    );
    assert_eq!(s.log(), "", "a dry run runs no command");
    assert!(!s.home().join(".config").exists() && !s.home().join("Library").exists());

    // Uninstall's dry run, once something is installed.
    assert_eq!(
        text(&s.leo(&["service", "install", "--manager", "launchd"])).0,
        0
    );
    let before = s.log();
    let (code, out, err) =
        text(&s.leo(&["service", "uninstall", "--dry-run", "--manager", "launchd"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        commands(&out),
        [format!("launchctl bootout gui/{uid}/leo.broker")]
    );
    assert!(
        out.contains(&format!("would remove {}", s.plist().display())),
        "{out}"
    );
    assert!(s.plist().exists());
    assert_eq!(s.log(), before);
}

/// Checks `node` against the content model of Apple's plist DTD (PropertyList-1.0.dtd):
/// `plist` holds one value; `dict` holds `key` and value pairs; `array` holds values; `key`,
/// `string`, `date`, `data`, `real` and `integer` hold text; `true` and `false` are empty.
fn plist_value(node: roxmltree::Node) -> Result<(), String> {
    fn elements<'a, 'i>(n: roxmltree::Node<'a, 'i>) -> Vec<roxmltree::Node<'a, 'i>> {
        n.children().filter(roxmltree::Node::is_element).collect()
    }
    let name = node.tag_name().name();
    match name {
        "dict" => {
            let children = elements(node);
            if !children.len().is_multiple_of(2) {
                return Err("a dict holds key, value pairs".into());
            }
            for pair in children.chunks(2) {
                if pair[0].tag_name().name() != "key" {
                    return Err(format!(
                        "a dict entry starts with <{}>, not <key>",
                        pair[0].tag_name().name()
                    ));
                }
                plist_value(pair[0])?;
                plist_value(pair[1])?;
            }
            Ok(())
        }
        "array" => elements(node).into_iter().try_for_each(plist_value),
        "key" | "string" | "date" | "data" | "real" | "integer" if elements(node).is_empty() => {
            Ok(())
        }
        "true" | "false" if node.children().next().is_none() => Ok(()),
        other => Err(format!("<{other}> is not a plist value here")),
    }
}

/// The value under `key` in a `dict`.
fn dict_get<'a>(dict: roxmltree::Node<'a, 'a>, key: &str) -> roxmltree::Node<'a, 'a> {
    let children: Vec<_> = dict
        .children()
        .filter(roxmltree::Node::is_element)
        .collect();
    children
        .chunks(2)
        .find(|p| p[0].text() == Some(key))
        .map(|p| p[1])
        .unwrap_or_else(|| panic!("no {key}"))
}

/// `xml` read as XML with its DTD.
fn parse_plist(xml: &str) -> roxmltree::Document<'_> {
    roxmltree::Document::parse_with_options(
        xml,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("not XML: {e}\n{xml}"))
}

#[test]
fn the_launchagent_as_written_is_a_valid_plist_that_runs_the_broker_on_this_home() {
    let s = Setup::new("never");
    let (code, out, err) = text(&s.leo(&["service", "install", "--manager", "launchd"]));
    assert_eq!(code, 0, "{out}{err}");
    let uid = nix::unistd::getuid();
    assert_eq!(
        s.log(),
        format!(
            "launchctl print gui/{uid}\nlaunchctl bootstrap gui/{uid} {}\n",
            s.plist().display()
        )
    );
    alone_in_dir(&s.plist());
    let logs = s.home().join("Library/Logs/leo");
    assert!(logs.is_dir());
    let xml = std::fs::read_to_string(s.plist()).unwrap();
    let doc = parse_plist(&xml);
    assert!(xml.contains(r#"<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">"#));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "plist");
    assert_eq!(root.attribute("version"), Some("1.0"));
    let values: Vec<_> = root
        .children()
        .filter(roxmltree::Node::is_element)
        .collect();
    assert_eq!(values.len(), 1, "a plist holds one value");
    plist_value(values[0]).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let dict = values[0];
    assert_eq!(dict_get(dict, "Label").text(), Some("leo.broker"));
    let argv: Vec<_> = dict_get(dict, "ProgramArguments")
        .children()
        .filter(roxmltree::Node::is_element)
        .map(|n| n.text().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(argv, [leo_exe(), "broker".to_owned()]);
    let env = dict_get(dict, "EnvironmentVariables");
    assert_eq!(
        dict_get(env, "LEO_HOME").text(),
        Some(s.leo_home().to_str().unwrap())
    );
    assert_eq!(dict_get(dict, "RunAtLoad").tag_name().name(), "true");
    assert_eq!(
        dict_get(dict_get(dict, "KeepAlive"), "SuccessfulExit")
            .tag_name()
            .name(),
        "false"
    );
    let out_log = logs.join("broker.out.log");
    assert_eq!(dict_get(dict, "StandardOutPath").text(), out_log.to_str());

    let (code, _, err) = text(&s.leo(&["service", "install", "--manager", "launchd"]));
    assert_eq!(code, 3, "{err}");
    let (code, _, err) = text(&s.leo(&["service", "uninstall", "--manager", "launchd"]));
    assert_eq!(code, 0, "{err}");
    assert!(!s.plist().exists());
    assert!(
        s.log()
            .ends_with(&format!("launchctl bootout gui/{uid}/leo.broker\n")),
        "{}",
        s.log()
    );
}

/// The variables the broker reads from its environment (the PostgreSQL store, the CA of the
/// cluster's peers) go into the service with `LEO_HOME`, or the service would start another
/// broker than this shell's; the file stays 0600, as it then holds the database's password.
#[test]
fn the_service_carries_the_store_and_the_ca_file_in_a_private_file() {
    let s = Setup::new("never");
    let url = "postgres://leo:s3cr%t\"@db.internal:5432/leo";
    let env = [("LEO_STORE_URL", url), ("LEO_CA_FILE", "ca.pem")];
    let install = |manager: &str| {
        let out = s.leo_with(&["service", "install", "--manager", manager], &env);
        let (code, out, err) = text(&out);
        assert_eq!(code, 0, "{out}{err}");
    };
    install("systemd");
    let unit = std::fs::read_to_string(s.unit()).unwrap();
    assert!(
        unit.contains(
            "Environment=\"LEO_STORE_URL=postgres://leo:s3cr%%t\\\"@db.internal:5432/leo\"\n"
        ),
        "{unit}"
    );
    // Relative to the directory `leo service install` ran in (the test's).
    let ca = std::env::current_dir().unwrap().join("ca.pem");
    assert!(
        unit.contains(&format!("Environment=\"LEO_CA_FILE={}\"\n", ca.display())),
        "{unit}"
    );
    let mode = std::fs::metadata(s.unit()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
    if require::systemd_analyze() {
        verify_unit(&s.unit(), &unit);
    }
    install("launchd");
    let xml = std::fs::read_to_string(s.plist()).unwrap();
    let doc = parse_plist(&xml);
    let dict = doc.root_element().first_element_child().unwrap();
    plist_value(dict).unwrap_or_else(|e| panic!("{e}\n{xml}"));
    let vars = dict_get(dict, "EnvironmentVariables");
    assert_eq!(dict_get(vars, "LEO_STORE_URL").text(), Some(url));
    assert_eq!(dict_get(vars, "LEO_CA_FILE").text(), ca.to_str());
    let mode = std::fs::metadata(s.plist()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
}
