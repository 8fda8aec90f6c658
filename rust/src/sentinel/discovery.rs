//! One round of discovery: which Sentinel to ask next, what its answer means, and when the
//! primary is known (see the module documentation of `crate::sentinel` for the rules).

use crate::cluster::NodeAddr;
use crate::error::{Error, ErrorKind};
use crate::net::Endpoint;
use crate::resp::Reply;
use crate::resp::reply::brief;

/// What a reply a Sentinel or a node sent shows of it in a message, at most.
const SHOWN_REPLY: usize = 300;

/// What a message says of one Sentinel passed over, at most: a Sentinel's bytes never make an
/// error or a log line longer than this per Sentinel.
const SHOWN_WHY: usize = 600;

/// The longest host name a Sentinel may give (a DNS name is at most 253 bytes).
const MAX_HOST: usize = 253;

/// What to do next in a round of discovery.
#[derive(Debug)]
pub enum Next {
    /// Ask this Sentinel `SENTINEL get-master-addr-by-name <service>`; its answer (or the
    /// error of trying) goes to [`Discovery::on_master_addr`].
    Ask(Endpoint),
    /// Ask this node `ROLE`; the answer goes to [`Discovery::on_role`].
    Confirm(NodeAddr),
    /// The primary a Sentinel named, confirmed ([`Discovery::passed_over`] says which
    /// Sentinels led nowhere before it).
    Found(NodeAddr),
    /// No Sentinel led to a primary, and none named another node than the primary in use,
    /// which still says it is the primary: it is kept. The error is what the round would have
    /// failed with.
    Kept(NodeAddr, Error),
    /// No Sentinel led to a primary (see the module documentation for the kinds).
    Failed(Error),
}

/// Why a Sentinel was passed over: what decides the kind of a failed round's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cause {
    /// The Sentinel refused the Sentinels' credentials.
    SentinelRefused,
    /// The Sentinel does not know the service.
    Unknown,
    /// The node it named refused the data server's credentials.
    NodeRefused,
    /// TLS failed, with the Sentinel or with the node it named.
    Tls,
    /// Anything else: down, slow, a replica named, an answer that makes no sense.
    Other,
}

/// One round of discovery at a time (see the module documentation of `crate::sentinel`).
#[derive(Debug)]
pub struct Discovery {
    service: String,
    /// The Sentinels, the one that last led to the primary first.
    sentinels: Vec<Endpoint>,
    /// The Sentinel asked now (an index into `sentinels`).
    current: usize,
    /// Each Sentinel passed over this round: why (`s1:26379: named ...`), and the kind of why.
    failures: Vec<(Cause, String)>,
    /// The nodes asked `ROLE` this round, each with what it led to: none is asked twice.
    confirmed: Vec<(NodeAddr, Cause, String)>,
    /// The primary in use when the round began.
    known: Option<NodeAddr>,
    /// A Sentinel named another node than `known` this round: the Sentinels say it moved.
    contradicted: bool,
    /// The round ended without a Sentinel's primary and asks `known` itself.
    confirming_known: bool,
}

impl Discovery {
    /// Discovery of `service`'s primary through `sentinels` (at least one).
    pub fn new(service: &str, sentinels: Vec<Endpoint>) -> Discovery {
        assert!(!sentinels.is_empty(), "settings always name a Sentinel");
        Discovery {
            service: service.to_owned(),
            sentinels,
            current: 0,
            failures: Vec::new(),
            confirmed: Vec::new(),
            known: None,
            contradicted: false,
            confirming_known: false,
        }
    }

    /// The Sentinels, in the order the next round asks them (after a round that found the
    /// primary, the one that led to it first).
    pub fn sentinels(&self) -> &[Endpoint] {
        &self.sentinels
    }

    /// `service "mymaster" (sentinels s1:26379, s2:26379)`: what errors name.
    pub fn describe(&self) -> String {
        let nodes: Vec<String> = self.sentinels.iter().map(ToString::to_string).collect();
        format!("service {:?} (sentinels {})", self.service, nodes.join(", "))
    }

    /// Starts a round, `known` being the primary in use (None at start): ask the first
    /// Sentinel.
    pub fn begin(&mut self, known: Option<&NodeAddr>) -> Next {
        self.current = 0;
        self.failures.clear();
        self.confirmed.clear();
        self.known = known.cloned();
        self.contradicted = false;
        self.confirming_known = false;
        Next::Ask(self.sentinels[0].clone())
    }

    /// What the Sentinels passed over in this round said (`s1:26379: named ..., which is a
    /// slave, not a primary`), for the log once a round found the primary after them.
    pub fn passed_over(&self) -> impl Iterator<Item = &str> {
        self.failures.iter().map(|(_, why)| why.as_str())
    }

    /// The asked Sentinel's answer: an address to confirm, or the next Sentinel to ask.
    pub fn on_master_addr(&mut self, answer: Result<Reply, Error>) -> Next {
        match answer {
            Ok(Reply::Array(parts)) => match parts.as_slice() {
                [Reply::Bulk(host), Reply::Bulk(port)] => match usable_address(host, port) {
                    Some(node) => self.named(node),
                    None => self.pass_over(Cause::Other, format!("named no usable address ({})", brief_list(&parts))),
                },
                _ => self.pass_over(Cause::Other, format!("answered {}, not [host, port]", brief_list(&parts))),
            },
            Ok(Reply::Nil | Reply::NilArray) => {
                let why = format!("does not know the service {:?}", self.service);
                self.pass_over(Cause::Unknown, why)
            }
            Ok(Reply::Error(text)) => {
                let text = String::from_utf8_lossy(&text).into_owned();
                self.pass_over(refusal_or(&text, Cause::Other), text)
            }
            Ok(other) => {
                self.pass_over(Cause::Other, format!("answered {}, not [host, port]", other.brief(SHOWN_REPLY)))
            }
            Err(err) => {
                let cause = match err.kind() {
                    ErrorKind::Authentication => Cause::SentinelRefused,
                    ErrorKind::Tls => Cause::Tls,
                    _ => refusal_or(err.message(), Cause::Other),
                };
                self.pass_over(cause, err.message().to_owned())
            }
        }
    }

    /// A Sentinel named `node`: confirm it, unless this round already did (and it led
    /// nowhere: a round that found the primary is over).
    fn named(&mut self, node: NodeAddr) -> Next {
        if self.known.as_ref() != Some(&node) {
            self.contradicted = true;
        }
        match self.confirmed.iter().find(|(asked, ..)| *asked == node) {
            Some((_, cause, why)) => {
                let (cause, why) = (*cause, why.clone());
                self.pass_over(cause, why)
            }
            None => Next::Confirm(node),
        }
    }

    /// The named node's answer to `ROLE`: found when it says `master`, else the next
    /// Sentinel.
    pub fn on_role(&mut self, node: &NodeAddr, answer: Result<Reply, Error>) -> Next {
        let (cause, why) = match answer {
            Ok(Reply::Array(parts)) if matches!(parts.first(), Some(Reply::Bulk(role)) if role == b"master") => {
                if self.confirming_known {
                    return Next::Kept(node.clone(), self.failure());
                }
                // The Sentinel that led here is asked first next time.
                self.sentinels[..=self.current].rotate_right(1);
                return Next::Found(node.clone());
            }
            Ok(Reply::Array(parts)) => {
                let role = match parts.first() {
                    Some(Reply::Bulk(role)) => String::from_utf8_lossy(role).into_owned(),
                    _ => "?".to_owned(),
                };
                (
                    Cause::Other,
                    format!("named {node}, which is a {}, not a primary (a failover in progress?)", cut(&role)),
                )
            }
            Ok(other) => (Cause::Other, format!("named {node}, whose ROLE answer was {}", other.brief(SHOWN_REPLY))),
            Err(err) => {
                let cause = match err.kind() {
                    ErrorKind::Authentication => Cause::NodeRefused,
                    ErrorKind::Tls => Cause::Tls,
                    _ => Cause::Other,
                };
                (cause, format!("named {node}, which did not confirm it is the primary: {}", err.message()))
            }
        };
        if self.confirming_known {
            let err = self.failure();
            let kept = format!("; the primary in use, {node}, did not confirm it still is: {}", cut(&why));
            return Next::Failed(Error::new(err.kind(), format!("{}{kept}", err.message())));
        }
        self.confirmed.push((node.clone(), cause, why.clone()));
        self.pass_over(cause, why)
    }

    /// The current Sentinel led nowhere (`why`): ask the next; after the last, ask the primary
    /// in use whether it still is one (when no Sentinel said it moved), or end the round.
    fn pass_over(&mut self, cause: Cause, why: String) -> Next {
        self.failures.push((cause, format!("{}: {}", self.sentinels[self.current], cut(&why))));
        self.current += 1;
        if let Some(next) = self.sentinels.get(self.current) {
            return Next::Ask(next.clone());
        }
        match &self.known {
            Some(known) if !self.contradicted && !self.confirmed.iter().any(|(asked, ..)| asked == known) => {
                self.confirming_known = true;
                Next::Confirm(known.clone())
            }
            _ => Next::Failed(self.failure()),
        }
    }

    /// The error of a round in which no Sentinel led to a primary: its kind from why each was
    /// passed over (see the module documentation of `crate::sentinel`).
    fn failure(&self) -> Error {
        let all = |causes: &[Cause]| self.failures.iter().all(|(cause, _)| causes.contains(cause));
        let any = |wanted: Cause| self.failures.iter().any(|(cause, _)| *cause == wanted);
        const SENTINELS_REFUSED: &str = "every Sentinel refused the credentials: set sentinel_password (and \
                                         sentinel_username) to the Sentinels' own, which are not the data server's";
        const NODE_REFUSED: &str = "the primary the Sentinels named refused the data server's credentials: set \
                                    password (and username) to the data server's, which are not the Sentinels' \
                                    (sentinel_password)";
        let (kind, what) = if all(&[Cause::SentinelRefused]) {
            (ErrorKind::Authentication, SENTINELS_REFUSED.to_owned())
        } else if all(&[Cause::NodeRefused]) {
            (ErrorKind::Authentication, NODE_REFUSED.to_owned())
        } else if all(&[Cause::SentinelRefused, Cause::NodeRefused]) {
            (ErrorKind::Authentication, format!("{SENTINELS_REFUSED}; and {NODE_REFUSED}"))
        } else if any(Cause::Unknown) && all(&[Cause::Unknown, Cause::SentinelRefused]) {
            (ErrorKind::InvalidInput, "the Sentinels do not know this service: check sentinel_service_name".to_owned())
        } else if all(&[Cause::Tls]) {
            (
                ErrorKind::Tls,
                "TLS failed with every Sentinel, or with the primary it named: check ssl_ca_certs, and that each \
                 certificate holds the name or address the Sentinels give (or set ssl_server_name)"
                    .to_owned(),
            )
        } else {
            (ErrorKind::Connection, "no primary is known".to_owned())
        };
        let failures: Vec<&str> = self.passed_over().collect();
        Error::new(kind, format!("{what}: {}: {}", self.describe(), failures.join("; ")))
    }
}

/// Whether a discovery failure is for good (credentials, service name, TLS): not worth
/// asking again soon.
pub fn is_permanent(err: &Error) -> bool {
    matches!(err.kind(), ErrorKind::Authentication | ErrorKind::InvalidInput | ErrorKind::Tls)
}

/// A Sentinel's error text that refuses the credentials counts as such; else `otherwise`.
fn refusal_or(text: &str, otherwise: Cause) -> Cause {
    // The text may come with the endpoint in front of the server's words.
    match ["NOAUTH", "WRONGPASS", "NOPERM"]
        .iter()
        .any(|code| text.starts_with(code) || text.contains(&format!(": {code}")))
    {
        true => Cause::SentinelRefused,
        false => otherwise,
    }
}

/// The node a Sentinel's `[host, port]` names, if it is one: a host of printable ASCII without
/// spaces (a name or an IP literal) no longer than a DNS name, and a port from 1 to 65535.
fn usable_address(host: &[u8], port: &[u8]) -> Option<NodeAddr> {
    let port = std::str::from_utf8(port).ok()?.parse::<u16>().ok().filter(|p| *p > 0)?;
    let host = std::str::from_utf8(host).ok()?;
    let printable = !host.is_empty() && host.len() <= MAX_HOST && host.bytes().all(|b| b.is_ascii_graphic());
    printable.then(|| NodeAddr::new(host, port))
}

fn brief_list(parts: &[Reply]) -> String {
    brief(&parts, SHOWN_REPLY)
}

/// `text`, cut to [`SHOWN_WHY`] bytes (`...` marks the cut).
fn cut(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= SHOWN_WHY {
        return text.into();
    }
    let mut end = SHOWN_WHY;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end]).into()
}
