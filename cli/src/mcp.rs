//! `/mcp`: where the `leo` binary plugs `leo-mcp`'s MCP server (`leo_mcp::http`) into the
//! broker's mount point (`leo_broker::mcp`). The broker checks who calls; the sidecar's
//! server, the one implementation of what an agent sees, answers; this file only joins the
//! two, so that neither library depends on the other.

use std::sync::Arc;

use leo_broker::home::Home;
use leo_broker::mcp::{Body, Caller, MakeMount, Mount, Pipe, Request, Responding};

/// The mount of `/mcp` for the broker at `home`, with its body limit.
pub fn mount(home: &Home, max_body: usize) -> MakeMount {
    let root = home.root.clone();
    Box::new(move |pipe: Pipe, stop| {
        let pipe = leo_mcp::dial::Pipe::new(move || pipe.open());
        let server = leo_mcp::http::Http::new(root.clone(), pipe, stop, max_body);
        Arc::new(Sidecars(server)) as Arc<dyn Mount>
    })
}

struct Sidecars(leo_mcp::http::Http);

impl Mount for Sidecars {
    fn serve(&self, caller: Caller, request: Request<Body>) -> Responding {
        let server = self.0.clone();
        let caller = leo_mcp::http::Caller {
            agent: caller.agent,
            token: caller.token,
            hold: caller.hold,
        };
        Box::pin(async move { server.serve(caller, request).await.map(Body::new) })
    }
}
