//! Which server each key goes to.
//!
//! - One server: every key goes there.
//! - Independent servers (static sharding): rendezvous hashing over the servers' names
//!   (`host:port`), so adding a server moves only about 1/(N+1) of the keys, all to it.
//! - Redis Cluster: the key's hash slot, looked up in the shared slot map. With
//!   `read_from="prefer_replica"`, a GET or EXISTS goes to the node of the slot's shard that
//!   `cluster::read_pick` chooses among the primary and its online replicas not known to be
//!   down; a read sent again (its node failed, or redirected it) goes to the primary.
//!
//! The servers themselves, and each worker's connections to them, are the node table's
//! (`nodes.rs`): routing names a node of it, adding one the first time a key goes there.

use super::cluster::ClusterView;
use super::nodes::Nodes;
use super::nodes::WARM_UP_NODES;
use crate::cluster::{NodeAddr, Rendezvous, key_slot, read_pick};
use crate::error::{Error, Result};
use crate::net::Endpoint;
use crate::settings::Settings;
use std::sync::Arc;

/// How keys map to servers; shared by the workers.
pub enum Route {
    Single,
    Shards(Rendezvous),
    Cluster(Arc<ClusterView>),
}

impl Route {
    /// The route for `settings`, and the servers every worker connects to at start: every
    /// server, or a cluster's first [`WARM_UP_NODES`] primaries.
    pub fn new(settings: &Settings, cluster: Option<Arc<ClusterView>>) -> Result<(Route, Vec<Endpoint>)> {
        if let Some(view) = cluster {
            let primaries = view.map().primaries().take(WARM_UP_NODES).map(NodeAddr::endpoint).collect();
            return Ok((Route::Cluster(view), primaries));
        }
        if settings.endpoints.len() == 1 {
            return Ok((Route::Single, settings.endpoints.clone()));
        }
        let names = settings.endpoints.iter().map(ToString::to_string);
        let rendezvous = Rendezvous::new(names).map_err(|e| Error::invalid(format!("servers: {e}")))?;
        Ok((Route::Shards(rendezvous), settings.endpoints.clone()))
    }

    pub fn cluster(&self) -> Option<&Arc<ClusterView>> {
        match self {
            Route::Cluster(view) => Some(view),
            _ => None,
        }
    }
}

impl Nodes {
    /// Where `key` goes: its server, and for a cluster its slot.
    pub fn route(&mut self, route: &Route, key: &[u8]) -> Result<(usize, u16)> {
        match route {
            Route::Single => Ok((0, 0)),
            Route::Shards(rendezvous) => Ok((rendezvous.pick(key), 0)),
            Route::Cluster(view) => {
                let slot = key_slot(key);
                self.route_slot(view, slot).map(|node| (node, slot))
            }
        }
    }

    /// Where a read (GET, EXISTS) of `key` goes: as [`Nodes::route`], but in a cluster whose
    /// replicas serve reads (`read_from="prefer_replica"`), to the node of the key's shard that
    /// `read_pick::reader` chooses, skipping nodes this engine knows to be down.
    pub fn route_read(&mut self, route: &Route, key: &[u8]) -> Result<(usize, u16)> {
        let Route::Cluster(view) = route else { return self.route(route, key) };
        if !self.reads_replicas() {
            return self.route(route, key);
        }
        let slot = key_slot(key);
        let map = view.map();
        let Some(shard) = map.shard(slot) else {
            drop(map);
            return self.route_slot(view, slot).map(|node| (node, slot));
        };
        let addr = read_pick::reader(shard, key, |addr| !self.known_down(addr)).clone();
        drop(map);
        self.node_at(&addr).map(|node| (node, slot))
    }

    /// The server that serves `slot` now.
    pub fn route_slot(&mut self, view: &ClusterView, slot: u16) -> Result<usize> {
        if let Some(err) = view.unavailable() {
            // Sentinel, while no primary is known: fail at once, saying why.
            view.request_refresh();
            return Err(err);
        }
        let map = view.map();
        match map.primary(slot) {
            Some(addr) => match self.known_node(addr) {
                Some(index) => Ok(index),
                None => {
                    let addr = addr.clone();
                    drop(map);
                    self.node_at(&addr)
                }
            },
            None => {
                view.request_refresh();
                Err(Error::invalid(format!(
                    "hash slot {slot} has no owner in the cluster (the cluster is being changed, or is broken)"
                )))
            }
        }
    }
}
