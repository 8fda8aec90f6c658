//! Which server each key goes to, and each worker's connections to those servers.
//!
//! - One server: every key goes there.
//! - Independent servers (static sharding): rendezvous hashing over the servers' names
//!   (`host:port`), so adding a server moves only about 1/(N+1) of the keys, all to it.
//! - Redis Cluster: the key's hash slot, looked up in the shared slot map.
//!
//! Each worker has `connections_per_worker` connections to every server it talks to; for a
//! cluster, to each primary, opened when the map first names it.

use super::cluster::ClusterView;
use crate::cluster::{NodeAddr, Rendezvous, key_slot};
use crate::conn::{Conn, PipelineLimits, ReconnectPolicy};
use crate::error::{Error, Result};
use crate::net::Endpoint;
use crate::settings::Settings;
use std::collections::HashMap;
use std::sync::Arc;

/// How keys map to servers; shared by the workers.
pub enum Route {
    Single,
    Shards(Rendezvous),
    Cluster(Arc<ClusterView>),
}

impl Route {
    /// The route for `settings`, and the servers every worker connects to at start.
    pub fn new(settings: &Settings, cluster: Option<Arc<ClusterView>>) -> Result<(Route, Vec<Endpoint>)> {
        if let Some(view) = cluster {
            let primaries = view.map().primaries().map(NodeAddr::endpoint).collect();
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

/// What a worker needs to open connections to a server it has not talked to yet.
pub struct ConnFactory {
    pub settings: Arc<Settings>,
    pub reconnect: ReconnectPolicy,
    pub pipeline: PipelineLimits,
}

/// A worker's servers and its connections to each.
pub struct Nodes {
    pub conns: Vec<Conn>,
    /// Indices into `conns`, per server.
    conns_of: Vec<Vec<usize>>,
    /// Cluster: the server index of each primary.
    by_addr: HashMap<NodeAddr, usize>,
    factory: ConnFactory,
}

impl Nodes {
    pub fn new(factory: ConnFactory, servers: &[Endpoint]) -> Result<Nodes> {
        let mut nodes = Nodes { conns: Vec::new(), conns_of: Vec::new(), by_addr: HashMap::new(), factory };
        for server in servers {
            nodes.add(server)?;
        }
        Ok(nodes)
    }

    pub fn count(&self) -> usize {
        self.conns_of.len()
    }

    /// Opens (lazily) `connections_per_worker` connections to `server`; returns its index.
    fn add(&mut self, server: &Endpoint) -> Result<usize> {
        let settings = &self.factory.settings;
        let addresses: Arc<[crate::net::Address]> = server.resolve()?.into();
        let options = Arc::new(settings.connect_options(server));
        let first = self.conns.len();
        for _ in 0..settings.connections_per_worker {
            let conn = Conn::new(options.clone(), addresses.clone(), self.factory.reconnect, self.factory.pipeline);
            self.conns.push(if settings.cluster { conn.handing_off() } else { conn });
        }
        self.conns_of.push((first..self.conns.len()).collect());
        if let Endpoint::Tcp { host, port } = server {
            self.by_addr.insert(NodeAddr::new(host.clone(), *port), self.conns_of.len() - 1);
        }
        Ok(self.conns_of.len() - 1)
    }

    /// The server index of a cluster primary, connecting to it if it is new.
    pub fn node_at(&mut self, addr: &NodeAddr) -> Result<usize> {
        match self.by_addr.get(addr) {
            Some(&index) => Ok(index),
            None => self.add(&addr.endpoint()),
        }
    }

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

    /// The server that serves `slot` now.
    pub fn route_slot(&mut self, view: &ClusterView, slot: u16) -> Result<usize> {
        let map = view.map();
        match map.primary(slot) {
            Some(addr) => match self.by_addr.get(addr) {
                Some(&index) => Ok(index),
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

    /// The connections to server `node`.
    pub fn conns_of(&self, node: usize) -> &[usize] {
        &self.conns_of[node]
    }

    /// The least loaded connection to server `node`.
    pub fn conn_for(&self, node: usize) -> usize {
        *self.conns_of[node]
            .iter()
            .min_by_key(|&&i| self.conns[i].outstanding_cost())
            .expect("a server has connections")
    }
}
