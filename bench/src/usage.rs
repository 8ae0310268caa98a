//! CPU time and context switches of a process, all threads, from `/proc`.

/// What a process has used so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// user + system time, in microseconds (kernel ticks of 10 ms, so coarse per snapshot).
    pub cpu_us: u64,
    /// voluntary + involuntary context switches.
    pub switches: u64,
}

impl std::ops::Sub for Usage {
    type Output = Usage;
    fn sub(self, o: Usage) -> Usage {
        Usage {
            cpu_us: self.cpu_us.saturating_sub(o.cpu_us),
            switches: self.switches.saturating_sub(o.switches),
        }
    }
}

/// Linux reports times in USER_HZ, which is 100 on every architecture it runs on.
const USER_HZ: u64 = 100;

/// The usage of process `pid` (every thread still alive), or `None` if it is gone.
pub fn of(pid: u32) -> Option<Usage> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the `(comm)`: state is field 3, utime 14 and stime 15 (1-based).
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let mut switches = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                switches += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    Some(Usage {
        cpu_us: ticks * 1_000_000 / USER_HZ,
        switches,
    })
}
