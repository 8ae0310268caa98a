//! One broker per home: `run/broker.lock`, locked (`flock`) before anything else in the home
//! is opened and held for the process's life, so a second broker on the same home stops
//! before it reads a config, a token or the store, and names the one that runs.
//!
//! The lock file also says who holds it, one line at a time, appended: `pid=N` once locked,
//! then `tcp=ADDR` (or `tcp=off`) and `tls=on|off` once the listeners are bound, then
//! `stopping` when shutdown begins. `leo status` and `leo doctor` read it (`holder`) to find
//! the broker that runs on this home and where it listens, whatever `--port` it was given. A
//! start that finds the lock held by a broker that is stopping (a restart by hand) waits for
//! it to exit. The file is emptied, never removed, when the holder stops: removing it would let
//! two starts lock two different files.
//!
//! The broker also removes only the socket files it bound itself (same device and inode), so
//! a broker that stops never takes away the sockets of one that started after it.

use std::fs::File;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use tracing::{info, warn};

use super::Home;
use crate::error::{BrokerError, Result};

/// How long a start waits for a holder that does not say `stopping` yet (it may have been
/// sent its signal a moment ago) before it refuses.
const GRACE: Duration = Duration::from_secs(1);
/// How long a start waits for a holder that is stopping to exit (its drain is bounded).
const STOPPING: Duration = Duration::from_secs(15);
/// How often a waiting start tries the lock again.
const POLL: Duration = Duration::from_millis(20);

/// This process's hold on the home, released when it is dropped (at the latest at exit).
pub struct HomeLock {
    file: Flock<File>,
    path: PathBuf,
    /// The socket files this broker bound: path, device, inode.
    sockets: Mutex<Vec<(PathBuf, u64, u64)>>,
}

/// What the lock file says of the broker that holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holder {
    /// `None` while it is starting (the file is empty between its lock and its first line).
    pub pid: Option<u32>,
    /// Where its TCP listener is, once bound: `None` before, `Some(None)` with `web.enabled: false`.
    pub tcp: Option<Option<SocketAddr>>,
    /// Its TCP listener serves HTTPS.
    pub tls: bool,
    /// Its shutdown began.
    pub stopping: bool,
}

impl Holder {
    /// Parses the lock file's lines; unknown lines are skipped (a newer broker's).
    fn parse(text: &str) -> Holder {
        let mut h = Holder::default();
        for line in text.lines() {
            match line.split_once('=') {
                Some(("pid", v)) => h.pid = v.trim().parse().ok(),
                Some(("tcp", "off")) => h.tcp = Some(None),
                Some(("tcp", v)) => h.tcp = Some(v.trim().parse().ok()),
                Some(("tls", v)) => h.tls = v.trim() == "on",
                None if line.trim() == "stopping" => h.stopping = true,
                _ => {}
            }
        }
        h
    }
}

/// The broker that runs on `home`, as its lock file says, if its process is alive. (A broker
/// killed with SIGKILL leaves its lines behind; its pid is then gone.) It does not try the
/// lock: a reader holding it, even for a moment, would make a broker starting then refuse.
pub fn holder(home: &Home) -> Option<Holder> {
    let text = std::fs::read_to_string(home.broker_lock()).ok()?;
    let holder = Holder::parse(&text);
    let pid = i32::try_from(holder.pid?).ok()?;
    match nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) {
        Ok(()) | Err(Errno::EPERM) => Some(holder),
        Err(_) => None,
    }
}

impl HomeLock {
    /// Locks `home` for this process, or says which broker holds it. `run/` must exist.
    pub fn acquire(home: &Home) -> Result<HomeLock> {
        let path = home.broker_lock();
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| BrokerError::io("open", &path, e))?;
        let started = Instant::now();
        loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(locked) => return HomeLock::claim(locked, path),
                Err((back, Errno::EWOULDBLOCK)) => {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    let holder = Holder::parse(&text);
                    let patience = if holder.stopping { STOPPING } else { GRACE };
                    if started.elapsed() >= patience {
                        return Err(BrokerError::AnotherBroker {
                            home: home.root.clone(),
                            pid: holder.pid,
                        });
                    }
                    file = back;
                    std::thread::sleep(POLL);
                }
                Err((_, e)) => return Err(BrokerError::io("lock", &path, e.into())),
            }
        }
    }

    /// The lock is ours: the file says so, from its first line.
    fn claim(file: Flock<File>, path: PathBuf) -> Result<HomeLock> {
        let mut f: &File = &file;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))
            .and_then(|()| f.set_len(0))
            .and_then(|()| writeln!(f, "pid={}", std::process::id()))
            .map_err(|e| BrokerError::io("write", &path, e))?;
        Ok(HomeLock {
            file,
            path,
            sockets: Mutex::new(Vec::new()),
        })
    }

    /// Appends `lines` to the lock file; a failure is logged (only readers lose).
    fn append(&self, lines: &str) {
        let mut f: &File = &self.file;
        if let Err(e) = f.write_all(lines.as_bytes()) {
            warn!(path = %self.path.display(), error = %e, "cannot write the lock file");
        }
    }

    /// Records where the TCP listener is (`None`: no TCP listener).
    pub(crate) fn listening(&self, tcp: Option<SocketAddr>, tls: bool) {
        let tcp = tcp.map_or_else(|| "off".to_owned(), |a| a.to_string());
        let tls = if tls { "on" } else { "off" };
        self.append(&format!("tcp={tcp}\ntls={tls}\n"));
    }

    /// Records that shutdown began: a start that finds the lock held waits for this broker.
    pub(crate) fn stopping(&self) {
        self.append("stopping\n");
    }

    /// Remembers the socket file at `path`, just bound by this broker.
    pub(crate) fn bound(&self, path: &Path) -> Result<()> {
        let meta = std::fs::metadata(path).map_err(|e| BrokerError::io("read", path, e))?;
        if let Ok(mut sockets) = self.sockets.lock() {
            sockets.push((path.to_path_buf(), meta.dev(), meta.ino()));
        }
        Ok(())
    }

    /// Removes the socket files this broker bound, and only those: a file at the same path
    /// that is another's (bound after this broker's was removed by hand) stays.
    pub(crate) fn remove_sockets(&self) {
        let Ok(mut sockets) = self.sockets.lock() else {
            return;
        };
        for (path, dev, ino) in sockets.drain(..) {
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.dev() == dev && m.ino() == ino => {
                    let _ = std::fs::remove_file(&path);
                }
                Ok(_) => {
                    info!(path = %path.display(), "left the socket file: another process bound it")
                }
                Err(_) => {}
            }
        }
    }
}

impl Drop for HomeLock {
    /// Empties the file while the lock is still held: the next reader sees no broker.
    fn drop(&mut self) {
        let _ = self.file.set_len(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_read_back() {
        let h = Holder::parse("pid=42\ntcp=127.0.0.1:4318\ntls=on\nstopping\nlater=1\n");
        assert_eq!(h.pid, Some(42));
        assert_eq!(h.tcp, Some(Some("127.0.0.1:4318".parse().unwrap())));
        assert!(h.tls && h.stopping);
        let h = Holder::parse("pid=7\ntcp=off\ntls=off\n");
        assert_eq!((h.tcp, h.tls, h.stopping), (Some(None), false, false));
        assert_eq!(Holder::parse(""), Holder::default());
    }

    #[test]
    fn a_second_lock_on_one_home_is_refused_naming_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        std::fs::create_dir_all(home.run()).unwrap();
        let first = HomeLock::acquire(&home).unwrap();
        let mode = std::fs::metadata(home.broker_lock())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let err = HomeLock::acquire(&home).err().unwrap().to_string();
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        assert_eq!(std::fs::read_to_string(home.broker_lock()).unwrap(), "");
        assert!(HomeLock::acquire(&home).is_ok());
    }
}
