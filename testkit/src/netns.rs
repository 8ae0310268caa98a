//! Hosts for tests that cross a network: Linux network namespaces joined by veth pairs, each
//! with an address of its own, so that a broker, an agent and an app talk over addresses that
//! are not loopback, as on three machines.
//!
//! [`Hosts::new`] makes three: the broker's (`10.203.0.1`, with one veth to each other host),
//! an agent's (`10.203.0.2`) and an app's (`10.203.0.6`, routed to the broker's address
//! through its own pair). The addresses exist only inside these namespaces; nothing is added to
//! the machine's own network. Creating them needs root and `ip` (iproute2); where that fails
//! every host is loopback (`127.0.0.1`) and the test runs the same steps there, as it does when
//! `LEO_TEST_NETNS=loopback` asks for it (to run that path where namespaces can be made).
//! [`Hosts::isolated`] says which ran, and `new` prints it, so a run never passes quietly
//! without the namespaces it meant to use. The namespaces are deleted when `Hosts` is dropped,
//! a failing test's unwinding included, and a namespace this module left behind in a process
//! that no longer runs is deleted by the next `new`.
//!
//! A program runs on a host through [`Host::command`] (`ip netns exec NAME …`, which execs it,
//! so its pid is the program's), or [`Host::argv`] for a command built elsewhere. Code of the test itself runs there on a thread of its own
//! ([`Host::thread`]): the thread enters the namespace, and every socket it (or a thread it
//! starts) opens is that host's.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::{Command as StdCommand, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where a host's processes and sockets live.
#[derive(Debug, Clone)]
pub struct Host {
    /// The namespace, or `None` on loopback.
    netns: Option<String>,
    /// The address others reach this host at.
    pub addr: IpAddr,
}

impl Host {
    /// `program` to run on this host.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
        match &self.netns {
            Some(name) => {
                let mut cmd = tokio::process::Command::new("ip");
                cmd.args(["netns", "exec", name]).arg(program);
                cmd
            }
            None => tokio::process::Command::new(program),
        }
    }

    /// The command line that runs `program` on this host: `ip netns exec NAME program` (with
    /// `ip` by its full path, for a command whose own PATH lacks it), or `program` alone.
    pub fn argv(&self, program: &str) -> Vec<String> {
        let mut argv = Vec::new();
        if let Some(name) = &self.netns {
            let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
                .into_iter()
                .find(|p| Path::new(p).is_file())
                .unwrap_or("ip");
            argv.extend([ip, "netns", "exec", name].map(str::to_owned));
        }
        argv.push(program.to_owned());
        argv
    }

    /// Runs `work` on a new thread inside this host's namespace (on loopback, a plain thread).
    pub fn thread<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let netns = self.netns.clone();
        std::thread::spawn(move || {
            if let Some(name) = netns {
                enter(&name);
            }
            work()
        })
    }
}

/// Moves the calling thread into the network namespace `name`.
fn enter(name: &str) {
    let path = Path::new("/var/run/netns").join(name);
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
        .unwrap_or_else(|e| panic!("setns {name}: {e}"));
}

/// The broker's host and two others, in namespaces or on loopback.
pub struct Hosts {
    pub broker: Host,
    pub agent: Host,
    pub app: Host,
    created: Vec<String>,
}

/// The prefix of every namespace this module creates: `leo-t<pid>-<n><role>`.
const PREFIX: &str = "leo-t";

impl Hosts {
    /// Three hosts in network namespaces, or on loopback where they cannot be made.
    pub fn new() -> Hosts {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        remove_stale();
        let tag = format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let mut hosts = Hosts {
            broker: loopback(),
            agent: loopback(),
            app: loopback(),
            created: Vec::new(),
        };
        let made = if std::env::var("LEO_TEST_NETNS").as_deref() == Ok("loopback") {
            Err("LEO_TEST_NETNS=loopback asks for it".to_owned())
        } else {
            hosts
                .create(&tag)
                .map_err(|why| format!("network namespaces cannot be made here ({why})"))
        };
        match made {
            Ok(()) => eprintln!(
                "netns: ran in network namespaces: broker {}, agent {}, app {}",
                hosts.broker.addr, hosts.agent.addr, hosts.app.addr
            ),
            Err(why) => {
                hosts.remove();
                hosts.broker = loopback();
                hosts.agent = loopback();
                hosts.app = loopback();
                eprintln!("netns: ran on loopback: {why}");
            }
        }
        hosts
    }

    /// True when the hosts are namespaces, false on loopback.
    pub fn isolated(&self) -> bool {
        self.broker.netns.is_some()
    }

    fn create(&mut self, tag: &str) -> Result<(), String> {
        let [b, a, p] = ["b", "a", "p"].map(|role| format!("{tag}{role}"));
        for name in [&b, &a, &p] {
            ip(&["netns", "add", name])?;
            self.created.push(name.clone());
            ip(&["-n", name, "link", "set", "lo", "up"])?;
        }
        // Interface names are at most 15 bytes: the tag's counter and pid keep them apart.
        let short = tag.trim_start_matches(PREFIX);
        link(
            &b,
            &format!("vb{short}a"),
            "10.203.0.1/30",
            &a,
            &format!("va{short}"),
            "10.203.0.2/30",
        )?;
        link(
            &b,
            &format!("vb{short}p"),
            "10.203.0.5/30",
            &p,
            &format!("vp{short}"),
            "10.203.0.6/30",
        )?;
        // The app reaches the broker's address through its own pair.
        ip(&[
            "-n",
            &p,
            "route",
            "add",
            "10.203.0.1/32",
            "via",
            "10.203.0.5",
        ])?;
        self.broker = Host {
            netns: Some(b),
            addr: Ipv4Addr::new(10, 203, 0, 1).into(),
        };
        self.agent = Host {
            netns: Some(a),
            addr: Ipv4Addr::new(10, 203, 0, 2).into(),
        };
        self.app = Host {
            netns: Some(p),
            addr: Ipv4Addr::new(10, 203, 0, 6).into(),
        };
        Ok(())
    }

    fn remove(&mut self) {
        for name in self.created.drain(..) {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}

impl Default for Hosts {
    fn default() -> Hosts {
        Hosts::new()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        self.remove();
    }
}

fn loopback() -> Host {
    Host {
        netns: None,
        addr: Ipv4Addr::LOCALHOST.into(),
    }
}

/// A veth pair from namespace `left` (`left_if`, `left_addr`) to `right`, both ends up.
fn link(
    left: &str,
    left_if: &str,
    left_addr: &str,
    right: &str,
    right_if: &str,
    right_addr: &str,
) -> Result<(), String> {
    ip(&[
        "link", "add", left_if, "netns", left, "type", "veth", "peer", "name", right_if, "netns",
        right,
    ])?;
    for (ns, dev, addr) in [(left, left_if, left_addr), (right, right_if, right_addr)] {
        ip(&["-n", ns, "addr", "add", addr, "dev", dev])?;
        ip(&["-n", ns, "link", "set", dev, "up"])?;
    }
    Ok(())
}

/// Runs `ip ARGS`; its stderr is the error.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = StdCommand::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Deletes the namespaces of test processes that no longer run (one killed mid-test).
fn remove_stale() {
    let Ok(entries) = std::fs::read_dir("/var/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", &name]);
        }
    }
}
