//! Ownership: the first client to claim one of an agent's calls owns that agent's group.
//!
//! Two devices running the same app both see every call; ownership makes the agent's
//! conversation stick to the device that answered first, instead of alternating between them.
//! An owner keeps the group until it disconnects or withdraws the group.

use std::collections::HashMap;

use crate::registry::ClientId;
use crate::store::Op;

#[derive(Debug, Default)]
pub struct Owners {
    by_agent_group: HashMap<(String, String), ClientId>,
    /// Changes not yet handed to the store (see `requests`).
    journal: Vec<Op>,
}

impl Owners {
    /// The owner of `agent`'s `group`, if any.
    pub fn owner(&self, agent: &str, group: &str) -> Option<&ClientId> {
        self.by_agent_group
            .get(&(agent.to_owned(), group.to_owned()))
    }

    /// Makes `client` the owner unless someone already is; returns the owner.
    pub fn take(&mut self, agent: &str, group: &str, client: &str) -> &ClientId {
        let journal = &mut self.journal;
        self.by_agent_group
            .entry((agent.to_owned(), group.to_owned()))
            .or_insert_with(|| {
                journal.push(Op::Owner {
                    agent: agent.to_owned(),
                    group: group.to_owned(),
                    client_id: client.to_owned(),
                });
                client.to_owned().into()
            })
    }

    /// Forgets the owner of `agent`'s `group` in memory (the claim that follows records the
    /// new one).
    pub fn forget(&mut self, agent: &str, group: &str) {
        self.by_agent_group
            .remove(&(agent.to_owned(), group.to_owned()));
    }

    /// Puts back an owner the store had (not journaled).
    pub fn restore(&mut self, agent: String, group: String, client: String) {
        self.by_agent_group.insert((agent, group), client.into());
    }

    /// Releases everything `client` owns.
    pub fn release_client(&mut self, client: &str) {
        self.by_agent_group.retain(|_, owner| owner != client);
        self.journal.push(Op::OwnersReleased {
            client_id: client.to_owned(),
            group: None,
        });
    }

    /// Releases what `client` owns of `group`.
    pub fn release_group(&mut self, client: &str, group: &str) {
        self.by_agent_group
            .retain(|(_, g), owner| !(owner == client && g == group));
        self.journal.push(Op::OwnersReleased {
            client_id: client.to_owned(),
            group: Some(group.to_owned()),
        });
    }

    /// The changes made since the last call, for the store.
    pub fn take_journal(&mut self) -> Vec<Op> {
        std::mem::take(&mut self.journal)
    }
}
