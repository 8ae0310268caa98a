//! Log messages and sampling requests a claimant sends its caller while a call is live.
//!
//! Both take the road of progress and questions (`relay`): to the one sidecar session that
//! made the call, as `log` and `sample` frames on its outbox. A log message is advice, like a
//! progress report: dropped when the session is too busy. A sampling request's HTTP request
//! waits, as a question's does, for the sidecar's `sample_answer`, the call's end or its
//! deadline.

use leo_protocol::ErrorCode;
use leo_protocol::ipc::BrokerFrame;
use leo_protocol::logging::{LogBody, sanitized_data};
use leo_protocol::requests::RequestAck;
use leo_protocol::sampling::{SampleBody, SampleOutcome, sanitized_params};
use leo_protocol::sanitize::{Lines, sanitize};
use serde_json::Value;
use tokio::sync::oneshot;
use tracing::debug;

use super::Broker;
use super::relay::{Relay, refusal_of};
use crate::refusal::Refusal;
use crate::requests::ConnId;

/// Removes a sampling request's waiter however its HTTP request ends.
struct Forget<'a> {
    relay: &'a Relay,
    sample: u64,
}

impl Drop for Forget<'_> {
    fn drop(&mut self) {
        self.relay.lock().samples.remove(&self.sample);
    }
}

impl Broker {
    /// `POST …/requests/{id}/log`: passes the claimant's log message to the caller's session.
    pub fn log_for_call(
        &self,
        id: &str,
        body: LogBody,
        caller: &str,
    ) -> Result<RequestAck, Refusal> {
        body.check()
            .map_err(|m| Refusal::new(ErrorCode::InvalidParameter, m))?;
        let route = Self::claimed_route(&self.lock(), id, &body.client_id, caller)?;
        let frame = BrokerFrame::Log {
            id: route.local_id,
            level: body.level,
            logger: body.logger.map(|l| sanitize(&l, Lines::Join).into_owned()),
            data: sanitized_data(body.data),
        };
        Ok(self.advise(id, &route, &frame))
    }

    /// `POST …/requests/{id}/sample`: asks the harness's model for a completion and waits for
    /// the harness's answer, at most until the call ends or times out.
    pub async fn ask_sample(
        &self,
        id: &str,
        body: SampleBody,
        caller: &str,
    ) -> Result<Value, Refusal> {
        body.check()
            .map_err(|m| Refusal::new(ErrorCode::InvalidParameter, m))?;
        let route = Self::claimed_route(&self.lock(), id, &body.client_id, caller)?;
        let (tx, rx) = oneshot::channel();
        let sample = {
            let mut relay = self.relay.lock();
            relay.next_sample += 1;
            let sample = relay.next_sample;
            relay.samples.insert(sample, (route.conn, tx));
            sample
        };
        let _forget = Forget {
            relay: &self.relay,
            sample,
        };
        let frame = BrokerFrame::Sample {
            id: route.local_id,
            sample,
            params: sanitized_params(body.params),
        };
        match self.send_and_wait(id, &route, &frame, rx).await? {
            SampleOutcome::Answer { result } => Ok(result),
            SampleOutcome::Refused { error } => Err(refusal_of(error)),
        }
    }

    /// The sidecar of session `conn` answered sampling request `sample`.
    pub fn sample_answered(&self, conn: ConnId, sample: u64, outcome: SampleOutcome) {
        let mut relay = self.relay.lock();
        match relay.samples.get(&sample) {
            Some((c, _)) if *c == conn => {
                if let Some((_, tx)) = relay.samples.remove(&sample) {
                    let _ = tx.send(outcome);
                }
            }
            _ => debug!(sample, "answer to a sampling request nobody waits for"),
        }
    }
}
