//! `leo broker`: runs the daemon (`leo_broker::daemon`) in the foreground on one thread, with
//! logs on stderr and the banner on stdout.

use std::net::IpAddr;

use anyhow::Context;
use leo_broker::home::Home;
use leo_broker::{daemon, server};

use crate::banner;

/// Colour in logs only on a terminal, and never with `NO_COLOR` set (no-color.org): a log file
/// or a pipe gets plain text that `grep` reads.
pub fn log_colour() -> bool {
    use std::io::IsTerminal;
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !no_color && std::io::stderr().is_terminal()
}

pub fn run(home: Home, port: Option<u16>, bind: Option<IpAddr>) -> anyhow::Result<()> {
    // One thread. A call crosses the broker as a handful of short steps (an IPC frame, an SSE
    // event, a claim, a result); on a work-stealing pool each step woke another worker, and those
    // hand-offs (5 futex calls and 6 extra context switches per call) cost more than the work.
    // Measured by `leo-bench` on 2 cores: the broker's leg of a call (IPC → broker → app →
    // result) fell from about 300 to 190 µs p50. Throughput is bounded by one core instead,
    // which still carries over 16,000 calls/s (bench/results.md).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // Prepared before the runtime runs anything: with PostgreSQL the start waits for the
    // database (the cluster's tokens), which must not hold the runtime's one thread.
    let mut prepared = daemon::prepare(home)?;
    runtime.block_on(async move {
        let base = &mut prepared.base;
        if port.is_some() || bind.is_some() {
            let mut config = (*base.config).clone();
            if let Some(port) = port {
                config.web.port = port;
            }
            if let Some(bind) = bind {
                config.web.bind = bind;
            }
            base.config = std::sync::Arc::new(config);
        }
        base.mcp = Some(crate::mcp::mount(
            &base.home,
            base.config.web.max_body_bytes,
        ));
        let stop = server::signals();
        let listeners = server::bind(&prepared.base).await?;
        let tcp = match &listeners.tcp {
            Some(l) => Some(l.local_addr().context("cannot read the TCP address")?),
            None => None,
        };
        banner::print(&prepared.base.home, tcp, prepared.base.tls.is_some())?;
        daemon::run(prepared, listeners, stop).await?;
        anyhow::Ok(())
    })
}
