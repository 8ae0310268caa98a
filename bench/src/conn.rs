//! The bare HTTP client of the breakdown rows: the SDK's own client (`leo_app::http`), whose
//! keep-alive pool holds the one connection these rows post on one request at a time, to time
//! a round trip to the broker with nothing else around it (over TCP, HTTPS or the socket).

use leo_app::Endpoint;
use leo_app::http::Client;
use leo_testkit::http::{Http, Target};

pub struct RawConn {
    client: Client,
}

impl RawConn {
    /// A client of `http`'s broker (TCP or its unix socket), with its token.
    pub async fn open(http: &Http) -> anyhow::Result<RawConn> {
        let endpoint = match &http.target {
            Target::Tcp(addr) => Endpoint::from_url(&format!("http://{addr}"))?,
            Target::Unix(path) => Endpoint::Unix(path.clone()),
        };
        let token = http.token.as_deref().unwrap_or_default();
        Ok(RawConn {
            client: Client::new(endpoint, token)?,
        })
    }

    /// An HTTPS client of `broker` (started with `web.tls`), trusting its `leo tls init` CA.
    pub fn https(broker: &leo_testkit::Broker) -> anyhow::Result<RawConn> {
        let endpoint = Endpoint::from_url(&format!("https://localhost:{}", broker.addr.port()))?;
        let ca = leo_testkit::tls::ca_file(broker.home());
        let tls = leo_app::http::connector(Some(&ca))?;
        Ok(RawConn {
            client: Client::with_tls(endpoint, &broker.operator_token(), Some(tls))?,
        })
    }

    /// POSTs a JSON body; returns the status (the body is read and dropped).
    pub async fn post(&mut self, path: &str, body: Vec<u8>) -> anyhow::Result<u16> {
        Ok(self.client.post_json(path, body).await?.status())
    }
}
