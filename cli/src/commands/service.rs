//! `leo service install | uninstall | status`: run the broker at login and restart it after a
//! crash, through the user's own service manager: a systemd user unit on Linux
//! (`~/.config/systemd/user/leo.service`), a LaunchAgent on macOS
//! (`~/Library/LaunchAgents/leo.broker.plist`, logs in `~/Library/Logs/leo/`).
//!
//! The file names the binary by its absolute path and carries this command's `LEO_HOME` and
//! every other variable the broker reads that is set here (`LEO_STORE_URL`, `LEO_CA_FILE`:
//! `leo_broker::config::BROKER_ENVIRONMENT`), so the service runs the broker this shell would.
//! The file is written 0600, as it may then hold the database's password. It is written whole or not at all (a temp file
//! beside it, then a rename), and removed again if the service manager refuses it, so a failed
//! install leaves nothing that a second one would take for "already installed". The service
//! manager is always `systemctl` / `launchctl` as found on `PATH`; `--dry-run` prints the file
//! and those commands and changes nothing. Where there is no user service manager (a container
//! without systemd) it says so and prints the foreground command instead.
//!
//! Exit codes: 0 done; 1 the service manager failed (or, for `status`, the service is
//! installed but the broker does not answer); 2 no user service manager here, or a bad
//! argument; 3 nothing to do: installed already (`install`), not installed (`uninstall`,
//! `status`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;
use leo_broker::home::Home;

use crate::banner::sh_quote;

/// The systemd unit's name.
pub const UNIT: &str = "leo.service";
/// The LaunchAgent's label (its file is `LABEL.plist`).
pub const LABEL: &str = "leo.broker";

/// The service manager failed.
const EXIT_FAILED: u8 = 1;
/// No user service manager here.
const EXIT_NO_MANAGER: u8 = 2;
/// Nothing to do: installed already, or not installed.
const EXIT_NOTHING_TO_DO: u8 = 3;

/// `--help` text for `leo service`.
pub const HELP: &str = "Exit codes: 0 done; 1 the service manager failed (status: installed, \
but the broker does not answer); 2 no user service manager here (it prints the foreground \
command), or a bad argument; 3 nothing to do: already installed (install), not installed \
(uninstall, status).";

#[derive(Debug, clap::Subcommand)]
pub enum ServiceCommand {
    /// Write the service file, then enable and start it: the broker runs at login and is
    /// restarted after a crash.
    Install(Opts),
    /// Stop and disable the service, then remove its file.
    Uninstall(Opts),
    /// The service's state next to the broker's own.
    Status(ManagerOpt),
}

#[derive(Debug, clap::Args)]
pub struct Opts {
    /// Print the file and the commands that would be run; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub manager: ManagerOpt,
}

#[derive(Debug, clap::Args)]
pub struct ManagerOpt {
    /// The service manager [default: launchd on macOS, systemd elsewhere].
    #[arg(long, value_enum)]
    pub manager: Option<Manager>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Manager {
    /// A systemd user unit, through `systemctl --user`.
    Systemd,
    /// A LaunchAgent, through `launchctl`.
    Launchd,
}

impl ManagerOpt {
    fn pick(&self) -> Manager {
        self.manager.unwrap_or(if cfg!(target_os = "macos") {
            Manager::Launchd
        } else {
            Manager::Systemd
        })
    }
}

/// One service as this command would install it.
struct Service {
    manager: Manager,
    /// The unit or plist.
    file: PathBuf,
    /// The broker binary, absolute.
    exe: PathBuf,
    /// `LEO_HOME`, absolute.
    home: PathBuf,
    /// The service's environment: `LEO_HOME`, then each variable of
    /// `config::BROKER_ENVIRONMENT` set here (a file's path made absolute).
    env: Vec<(String, String)>,
    /// The user's home directory.
    user_home: PathBuf,
}

pub fn run(home: &Home, command: &ServiceCommand) -> crate::error::Result {
    crate::error::reported(outcome(home, command))
}

fn outcome(home: &Home, command: &ServiceCommand) -> u8 {
    let result = match command {
        ServiceCommand::Install(o) => {
            Service::new(home, o.manager.pick()).and_then(|s| s.install(o.dry_run))
        }
        ServiceCommand::Uninstall(o) => {
            Service::new(home, o.manager.pick()).and_then(|s| s.uninstall(o.dry_run))
        }
        ServiceCommand::Status(m) => Service::new(home, m.pick()).map(|s| s.status(home)),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leo service: {e:#}");
            EXIT_FAILED
        }
    }
}

impl Service {
    fn new(home: &Home, manager: Manager) -> anyhow::Result<Service> {
        let exe = std::env::current_exe().context("cannot find this program's path")?;
        let exe = std::fs::canonicalize(&exe).unwrap_or(exe);
        let home = std::path::absolute(&home.root)
            .with_context(|| format!("{}: not a usable path", home.root.display()))?;
        let user_home = std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
            .context("HOME is not set: the service file lives in your home directory")?;
        let file = match manager {
            Manager::Systemd => std::env::var_os("XDG_CONFIG_HOME")
                .filter(|d| !d.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| user_home.join(".config"))
                .join("systemd/user")
                .join(UNIT),
            Manager::Launchd => user_home
                .join("Library/LaunchAgents")
                .join(format!("{LABEL}.plist")),
        };
        Ok(Service {
            manager,
            file,
            exe,
            env: environment(&home),
            home,
            user_home,
        })
    }

    /// Where launchd writes the broker's stdout and stderr.
    fn log_dir(&self) -> PathBuf {
        self.user_home.join("Library/Logs/leo")
    }

    /// The unit or plist, as written.
    fn contents(&self) -> String {
        match self.manager {
            Manager::Systemd => systemd_unit(&self.exe, &self.home, &self.env),
            Manager::Launchd => launchd_plist(&self.exe, &self.env, &self.log_dir()),
        }
    }

    fn install_commands(&self) -> Vec<Vec<String>> {
        match self.manager {
            Manager::Systemd => vec![
                systemctl(&["daemon-reload"]),
                systemctl(&["enable", "--now", UNIT]),
            ],
            Manager::Launchd => vec![words(&[
                "launchctl",
                "bootstrap",
                &gui_domain(),
                &self.file.display().to_string(),
            ])],
        }
    }

    fn uninstall_commands(&self) -> Vec<Vec<String>> {
        match self.manager {
            Manager::Systemd => vec![systemctl(&["disable", "--now", UNIT])],
            Manager::Launchd => vec![words(&[
                "launchctl",
                "bootout",
                &format!("{}/{LABEL}", gui_domain()),
            ])],
        }
    }

    /// The command run once the file is gone, so the manager forgets it.
    fn after_remove_commands(&self) -> Vec<Vec<String>> {
        match self.manager {
            Manager::Systemd => vec![systemctl(&["daemon-reload"])],
            Manager::Launchd => Vec::new(),
        }
    }

    /// `LEO_HOME=… leo broker`, for where no service manager runs it.
    fn foreground(&self) -> String {
        format!(
            "LEO_HOME={} {} broker",
            sh_quote(&self.home.display().to_string()),
            sh_quote(&self.exe.display().to_string())
        )
    }

    fn install(&self, dry_run: bool) -> anyhow::Result<u8> {
        if self.file.exists() {
            eprintln!(
                "leo service: already installed: {} exists. Run `leo service uninstall` first to \
                 install it again (for another LEO_HOME or binary); `leo service status` shows it.",
                self.file.display()
            );
            return Ok(EXIT_NOTHING_TO_DO);
        }
        let contents = self.contents();
        if dry_run {
            let mut out = format!("would write {}:\n{contents}", self.file.display());
            if self.manager == Manager::Launchd {
                let _ = writeln!(out, "would create {}", self.log_dir().display());
            }
            print_commands(&mut out, &self.install_commands());
            print!("{out}");
            return Ok(0);
        }
        if let Err(why) = self.manager_available() {
            return Ok(self.no_manager(&why));
        }
        if self.manager == Manager::Launchd {
            leo_broker::home::ensure_private_dir(&self.log_dir())?;
        }
        if let Some(dir) = self.file.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        leo_broker::home::write_atomic(&self.file, contents.as_bytes())?;
        if let Err(e) = run_all(&self.install_commands()) {
            // Take the file back: a retry must not find a service that never ran.
            let _ = run_all(&self.uninstall_commands());
            let _ = std::fs::remove_file(&self.file);
            let _ = run_all(&self.after_remove_commands());
            eprintln!(
                "leo service: {e:#}\nleo service: nothing installed ({} removed again)",
                self.file.display()
            );
            return Ok(EXIT_FAILED);
        }
        println!(
            "installed {} (LEO_HOME={}): the broker runs now, at every login, and again after a crash",
            self.file.display(),
            self.home.display()
        );
        Ok(0)
    }

    fn uninstall(&self, dry_run: bool) -> anyhow::Result<u8> {
        if !self.file.exists() {
            eprintln!(
                "leo service: not installed: there is no {}",
                self.file.display()
            );
            return Ok(EXIT_NOTHING_TO_DO);
        }
        if dry_run {
            let mut out = String::new();
            print_commands(&mut out, &self.uninstall_commands());
            let _ = writeln!(out, "would remove {}", self.file.display());
            print_commands(&mut out, &self.after_remove_commands());
            print!("{out}");
            return Ok(0);
        }
        if let Err(why) = self.manager_available() {
            return Ok(self.no_manager(&why));
        }
        // A service that is not loaded cannot be stopped; its file goes all the same.
        if let Err(e) = run_all(&self.uninstall_commands()) {
            eprintln!("leo service: {e:#} (removing the file all the same)");
        }
        std::fs::remove_file(&self.file)
            .with_context(|| format!("cannot remove {}", self.file.display()))?;
        if let Err(e) = run_all(&self.after_remove_commands()) {
            eprintln!("leo service: {e:#}");
            return Ok(EXIT_FAILED);
        }
        println!(
            "uninstalled: {} removed; the broker no longer starts at login",
            self.file.display()
        );
        Ok(0)
    }

    fn status(&self, home: &Home) -> u8 {
        let broker = match super::snapshot::Snapshot::fetch(&super::api::Api::new(home)) {
            Ok(s) => Ok(format!(
                "running ({} apps, {} agents)",
                s.apps.len(),
                s.agents.len()
            )),
            Err(e) => Err(e.to_string()),
        };
        let installed = self.file.exists();
        let service = if !installed {
            format!("not installed (no {})", self.file.display())
        } else {
            match self.manager_available() {
                Ok(()) => format!("{} ({})", self.manager_state(), self.file.display()),
                Err(why) => format!("installed ({}), but {why}", self.file.display()),
            }
        };
        println!("service: {service}");
        match &broker {
            Ok(state) => println!("broker:  {state} (LEO_HOME={})", home.root.display()),
            Err(why) => println!("broker:  {why}"),
        }
        match (installed, broker.is_ok()) {
            (false, _) => EXIT_NOTHING_TO_DO,
            (true, true) => 0,
            (true, false) => EXIT_FAILED,
        }
    }

    /// What the service manager says of the service, in one phrase.
    fn manager_state(&self) -> String {
        let ask = |args: &[&str]| {
            let (program, rest) = args.split_first().unwrap_or((&"", &[]));
            Command::new(program)
                .args(rest)
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
                .unwrap_or_default()
        };
        match self.manager {
            Manager::Systemd => {
                let active = ask(&["systemctl", "--user", "is-active", UNIT]);
                let enabled = ask(&["systemctl", "--user", "is-enabled", UNIT]);
                format!("{active}, {enabled} (systemctl --user status {UNIT})")
            }
            Manager::Launchd => {
                let target = format!("{}/{LABEL}", gui_domain());
                let printed = ask(&["launchctl", "print", &target]);
                let state = printed
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("state = "))
                    .unwrap_or("not loaded");
                format!("{state} (launchctl print {target})")
            }
        }
    }

    /// Whether a user service manager answers here; `Err` says why not.
    fn manager_available(&self) -> Result<(), String> {
        let (program, args): (&str, Vec<String>) = match self.manager {
            Manager::Systemd => ("systemctl", words(&["--user", "show-environment"])),
            Manager::Launchd => ("launchctl", words(&["print", &gui_domain()])),
        };
        match Command::new(program)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
        {
            Err(e) => Err(format!("{program} cannot run ({e})")),
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(format!(
                "`{program} {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&o.stderr).trim()
            )),
        }
    }

    /// Says there is no user service manager, and how to run the broker without one.
    fn no_manager(&self, why: &str) -> u8 {
        let manager = match self.manager {
            Manager::Systemd => "systemd user manager",
            Manager::Launchd => "launchd user domain",
        };
        eprintln!(
            "leo service: no {manager} here: {why}.\nNothing was installed. Run the broker in the \
             foreground instead (in a terminal of its own, or under your own supervisor):\n  {}",
            self.foreground()
        );
        EXIT_NO_MANAGER
    }
}

/// `LEO_HOME`, then each variable the broker reads that is set here, by name.
fn environment(home: &Path) -> Vec<(String, String)> {
    let mut env = vec![("LEO_HOME".to_owned(), home.display().to_string())];
    for name in leo_broker::config::BROKER_ENVIRONMENT {
        let Some(value) = std::env::var_os(name).filter(|v| !v.is_empty()) else {
            continue;
        };
        let value = if name == leo_protocol::tls::CA_FILE_ENV {
            // A file named from this shell's directory: the service starts elsewhere.
            let path = PathBuf::from(&value);
            std::path::absolute(&path)
                .unwrap_or(path)
                .display()
                .to_string()
        } else {
            value.to_string_lossy().into_owned()
        };
        env.push((name.to_owned(), value));
    }
    env
}

/// The systemd user unit: starts `exe broker` with `env` (`LEO_HOME` first), restarts it
/// after a crash (a clean stop, SIGTERM from `systemctl stop`, stays stopped), at every login.
pub fn systemd_unit(exe: &Path, home: &Path, env: &[(String, String)]) -> String {
    let env: String = env
        .iter()
        .map(|(name, value)| {
            format!(
                "Environment={}\n",
                systemd_quote(&format!("{name}={value}"))
            )
        })
        .collect();
    format!(
        "# Written by `leo service install`; remove with `leo service uninstall`.\n\
         [Unit]\n\
         Description=Leo client tools broker (LEO_HOME={home_text})\n\
         \n\
         [Service]\n\
         Type=exec\n\
         {env}\
         ExecStart={exe} broker\n\
         Restart=on-failure\n\
         RestartSec=2\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        home_text = systemd_escape(&home.display().to_string()).replace('\n', " "),
        exe = systemd_quote(&exe.display().to_string()).replace('$', "$$"),
    )
}

/// `s` with systemd's specifier character escaped (`%` → `%%`).
fn systemd_escape(s: &str) -> String {
    s.replace('%', "%%")
}

/// `s` as one double-quoted systemd word.
fn systemd_quote(s: &str) -> String {
    let escaped = systemd_escape(s).replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{escaped}\"")
}

/// The LaunchAgent: runs `exe broker` at load (login) with `env` (`LEO_HOME` first), again
/// when it exits with an error, its stdout and stderr in `logs`.
pub fn launchd_plist(exe: &Path, env: &[(String, String)], logs: &Path) -> String {
    let s = |p: &Path| xml_escape(&p.display().to_string());
    let env: String = env
        .iter()
        .map(|(name, value)| {
            format!(
                "\t\t<key>{}</key>\n\t\t<string>{}</string>\n",
                xml_escape(name),
                xml_escape(value)
            )
        })
        .collect();
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- Written by `leo service install`; remove with `leo service uninstall`. -->
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>{LABEL}</string>
	<key>ProgramArguments</key>
	<array>
		<string>{exe}</string>
		<string>broker</string>
	</array>
	<key>EnvironmentVariables</key>
	<dict>
{env}	</dict>
	<key>RunAtLoad</key>
	<true/>
	<key>KeepAlive</key>
	<dict>
		<key>SuccessfulExit</key>
		<false/>
	</dict>
	<key>ProcessType</key>
	<string>Background</string>
	<key>StandardOutPath</key>
	<string>{out}</string>
	<key>StandardErrorPath</key>
	<string>{err}</string>
</dict>
</plist>
"#,
        exe = s(exe),
        out = s(&logs.join("broker.out.log")),
        err = s(&logs.join("broker.err.log")),
    )
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `gui/UID`: the logged-in user's launchd domain.
fn gui_domain() -> String {
    format!("gui/{}", nix::unistd::getuid())
}

fn systemctl(args: &[&str]) -> Vec<String> {
    let mut all = vec!["systemctl", "--user"];
    all.extend_from_slice(args);
    words(&all)
}

fn words(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

/// `would run:` and one `$ command` line each.
fn print_commands(out: &mut String, commands: &[Vec<String>]) {
    if commands.is_empty() {
        return;
    }
    out.push_str("would run:\n");
    for c in commands {
        let line: Vec<String> = c.iter().map(|w| sh_quote(w)).collect();
        let _ = writeln!(out, "$ {}", line.join(" "));
    }
}

/// Runs each command in turn; the first that fails stops the rest.
fn run_all(commands: &[Vec<String>]) -> anyhow::Result<()> {
    for c in commands {
        let Some((program, args)) = c.split_first() else {
            continue;
        };
        let out = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot run {program}"))?;
        if !out.status.success() {
            anyhow::bail!(
                "`{}` failed ({}): {}",
                c.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(())
}
