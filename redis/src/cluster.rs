//! Redis Cluster: a namespace's keys share one hash tag, so they live in
//! one slot, on one master. Every connection of the namespace goes to that
//! master, found by asking the cluster (`CLUSTER SLOTS`) each time a new
//! connection is opened; a call answered `MOVED`, or a master that stopped
//! answering, drops its connection (see [`transient`](crate::error)), and
//! the next connection asks again, so a failover or a resharding is
//! followed within the retry loop's backoff.
//!
//! Why not the `redis` crate's `ClusterConnection`: a namespace never needs
//! more than one node, and its users need what a plain connection to that
//! node gives: a blocking `XREADGROUP` that a stop cuts short with
//! `CLIENT UNBLOCK` by client id (on the node that blocks), Pub/Sub, and
//! this crate's own timeouts and retries. The crate's cluster feature gives
//! the slot of a key ([`redis::cluster_routing::get_slot`]).

use std::sync::Mutex;

use redis::{ConnectionAddr, ConnectionInfo, Value};

/// Where a namespace's slot lives, and how to ask.
pub(crate) struct Seeds {
    /// The namespace's slot.
    slot: u16,
    /// Clients for the nodes to ask, in turn: the seeds at first; once a
    /// node answered, that node, the seeds, and every node it named.
    nodes: Mutex<Vec<redis::Client>>,
    /// How many nodes, after the first (the last that answered), are the
    /// seeds, always asked.
    seeds: usize,
}

/// The slot of the keys of `prefix` (`{namespace}`): every key of a
/// namespace hashes to it.
pub(crate) fn slot_of(prefix: &str) -> u16 {
    redis::cluster_routing::get_slot(prefix.as_bytes())
}

/// `template`'s settings (TLS, user, password) for the node at
/// `host:port`.
fn at(template: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let mut info = template.clone();
    info.addr = match &template.addr {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_string(), port),
    };
    info
}

/// The nodes named in a `CLUSTER SLOTS` reply, and the master of `slot`:
/// `(host, port)` each.
type Topology = (Vec<(String, u16)>, Option<(String, u16)>);

/// Reads a `CLUSTER SLOTS` reply: `[[start, end, [host, port, id, …],
/// replicas…], …]`, asked of a node at host `asked`.
fn read_slots(reply: &Value, slot: u16, asked: &str) -> Topology {
    let node = |value: &Value| -> Option<(String, u16)> {
        let Value::Array(fields) = value else {
            return None;
        };
        let host = match fields.first()? {
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            Value::SimpleString(text) => text.clone(),
            _ => return None,
        };
        let Value::Int(port) = fields.get(1)? else {
            return None;
        };
        // An empty host is the one asked (a node that never met another
        // does not know its address); `?`, a node with no address yet, is
        // not one to connect to.
        if host == "?" {
            return None;
        }
        let host = if host.is_empty() {
            asked.to_string()
        } else {
            host
        };
        Some((host, u16::try_from(*port).ok()?))
    };
    let mut nodes = Vec::new();
    let mut master = None;
    let Value::Array(ranges) = reply else {
        return (nodes, master);
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(Value::Int(start)), Some(Value::Int(end))) = (fields.first(), fields.get(1))
        else {
            continue;
        };
        let owners: Vec<(String, u16)> = fields.iter().skip(2).filter_map(node).collect();
        if (*start..=*end).contains(&i64::from(slot)) {
            master = owners.first().cloned();
        }
        nodes.extend(owners);
    }
    (nodes, master)
}

impl Seeds {
    /// The seeds (at least one), for the keys of `prefix`.
    pub(crate) fn new(prefix: &str, seeds: Vec<redis::Client>) -> Seeds {
        let mut nodes = seeds.clone();
        nodes.insert(0, seeds[0].clone());
        Seeds {
            slot: slot_of(prefix),
            seeds: seeds.len(),
            nodes: Mutex::new(nodes),
        }
    }

    /// A client for the master of the namespace's slot, asking the known
    /// nodes in turn; `open` connects to a node with the caller's timeouts
    /// and handshake.
    ///
    /// # Errors
    ///
    /// The last node's error when none answered; `CLUSTERDOWN` when the
    /// answer names no master for the slot (a failover under way).
    pub(crate) fn master(
        &self,
        open: impl Fn(&redis::Client) -> redis::RedisResult<redis::Connection>,
    ) -> redis::RedisResult<redis::Client> {
        let nodes = self.nodes.lock().expect("nodes").clone();
        let mut last = None;
        for client in &nodes {
            let reply =
                open(client).and_then(|mut c| redis::cmd("CLUSTER").arg("SLOTS").query(&mut c));
            let reply: Value = match reply {
                Ok(reply) => reply,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            let template = client.get_connection_info();
            let asked = match &template.addr {
                ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.as_str(),
                ConnectionAddr::Unix(_) => "",
            };
            let (named, master) = read_slots(&reply, self.slot, asked);
            if !named.is_empty() {
                // The node that answered is asked first next time, then
                // the seeds, then the nodes it named.
                let mut known = vec![client.clone()];
                known.extend_from_slice(&nodes[1..=self.seeds]);
                for (host, port) in &named {
                    if let Ok(node) = redis::Client::open(at(template, host, *port)) {
                        known.push(node);
                    }
                }
                *self.nodes.lock().expect("nodes") = known;
            }
            return match master {
                Some((host, port)) => redis::Client::open(at(template, &host, port)),
                None => Err(redis::RedisError::from((
                    redis::ErrorKind::ClusterDown,
                    "no master serves the namespace's slot",
                ))),
            };
        }
        Err(last.unwrap_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::ClusterDown, "no cluster node to ask"))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(text: &str) -> Value {
        Value::BulkString(text.as_bytes().to_vec())
    }

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![bulk(host), Value::Int(port), bulk("id")])
    }

    #[test]
    fn the_master_of_the_slot_is_read_from_cluster_slots() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7000),
                node("10.0.0.4", 7003),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                node("10.0.0.2", 7001),
                node("?", 0),
            ]),
        ]);
        let (nodes, master) = read_slots(&reply, 6000, "h");
        assert_eq!(master, Some(("10.0.0.2".to_string(), 7001)));
        assert_eq!(nodes.len(), 3);
        assert_eq!(
            read_slots(&reply, 100, "h").1,
            Some(("10.0.0.1".into(), 7000))
        );
        assert_eq!(read_slots(&Value::Nil, 100, "h"), (vec![], None));
        let alone = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(16383),
            node("", 7000),
        ])]);
        assert_eq!(read_slots(&alone, 1, "h").1, Some(("h".into(), 7000)));
        assert_eq!(slot_of("{payments}"), slot_of("payments"));
    }
}
