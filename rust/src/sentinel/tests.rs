//! Discovery driven in memory: replies in, what to ask out.

use super::*;
use crate::error::{Error, ErrorKind};
use crate::net::Endpoint;

fn sentinels() -> Vec<Endpoint> {
    (1..=3).map(|i| Endpoint::Tcp { host: format!("s{i}"), port: 26379 }).collect()
}

fn bulk(text: &str) -> Reply {
    Reply::Bulk(text.as_bytes().to_vec())
}

fn addr(host: &str, port: &str) -> Result<Reply, Error> {
    Ok(Reply::Array(vec![bulk(host), bulk(port)]))
}

fn role(role: &str) -> Result<Reply, Error> {
    Ok(Reply::Array(vec![bulk(role), Reply::Integer(0), Reply::Array(vec![])]))
}

fn down(what: &str) -> Result<Reply, Error> {
    Err(Error::new(ErrorKind::Connection, format!("{what}: connection refused")))
}

fn refused() -> Result<Reply, Error> {
    Err(Error::new(ErrorKind::Authentication, "WRONGPASS invalid username-password pair"))
}

fn asked(next: Next) -> String {
    match next {
        Next::Ask(endpoint) => endpoint.to_string(),
        other => panic!("expected a Sentinel to ask, got {other:?}"),
    }
}

fn confirm(next: Next) -> NodeAddr {
    match next {
        Next::Confirm(node) => node,
        other => panic!("expected a ROLE to ask, got {other:?}"),
    }
}

fn failed(next: Next) -> Error {
    match next {
        Next::Failed(err) => err,
        other => panic!("expected the round to fail, got {other:?}"),
    }
}

#[test]
fn the_first_sentinel_names_the_primary_and_role_confirms_it() {
    let mut d = Discovery::new("mymaster", sentinels());
    assert_eq!(asked(d.begin(None)), "s1:26379");
    let node = confirm(d.on_master_addr(addr("10.0.0.5", "6380")));
    assert_eq!(node, NodeAddr::new("10.0.0.5", 6380));
    match d.on_role(&node, role("master")) {
        Next::Found(found) => assert_eq!(found, node),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_sentinel_that_is_down_or_names_a_replica_is_passed_over_and_the_one_that_led_goes_first() {
    let mut d = Discovery::new("mymaster", sentinels());
    d.begin(None);
    assert_eq!(asked(d.on_master_addr(down("s1:26379"))), "s2:26379");
    let old = confirm(d.on_master_addr(addr("10.0.0.5", "6379")));
    // A Sentinel that has not heard of the failover yet names the demoted primary.
    assert_eq!(asked(d.on_role(&old, role("slave"))), "s3:26379");
    let new = confirm(d.on_master_addr(addr("10.0.0.6", "6379")));
    assert!(matches!(d.on_role(&new, role("master")), Next::Found(n) if n == new));
    let order: Vec<String> = d.sentinels().iter().map(ToString::to_string).collect();
    assert_eq!(order, ["s3:26379", "s1:26379", "s2:26379"]);
    assert_eq!(asked(d.begin(None)), "s3:26379");
}

#[test]
fn no_primary_known_is_a_transient_error_naming_service_and_sentinels() {
    let mut d = Discovery::new("mymaster", sentinels());
    d.begin(None);
    d.on_master_addr(down("s1"));
    let node = confirm(d.on_master_addr(addr("10.0.0.5", "6379")));
    d.on_role(&node, Err(Error::new(ErrorKind::Timeout, "ROLE timed out")));
    let err = failed(d.on_master_addr(Ok(Reply::Nil)));
    assert_eq!(err.kind(), ErrorKind::Connection);
    assert!(!is_permanent(&err));
    for part in ["no primary is known", "\"mymaster\"", "s1:26379", "s2:26379", "s3:26379", "ROLE timed out"] {
        assert!(err.message().contains(part), "{part} missing: {err}");
    }
}

#[test]
fn wrong_sentinel_credentials_everywhere_are_a_permanent_authentication_error() {
    let mut d = Discovery::new("mymaster", sentinels());
    d.begin(None);
    d.on_master_addr(refused());
    d.on_master_addr(Ok(Reply::Error(b"NOAUTH Authentication required.".to_vec())));
    let err = failed(d.on_master_addr(refused()));
    assert_eq!(err.kind(), ErrorKind::Authentication);
    assert!(is_permanent(&err));
    assert!(err.message().contains("sentinel_password"), "{err}");
}

#[test]
fn an_unknown_service_is_a_permanent_invalid_input_error() {
    let mut d = Discovery::new("nosuch", sentinels());
    d.begin(None);
    d.on_master_addr(Ok(Reply::Nil));
    d.on_master_addr(Ok(Reply::NilArray));
    let err = failed(d.on_master_addr(Ok(Reply::Nil)));
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert!(err.message().contains("check sentinel_service_name") && err.message().contains("\"nosuch\""), "{err}");
    // One Sentinel down and the others not knowing it: still not a transient failure.
    d.begin(None);
    d.on_master_addr(down("s1"));
    d.on_master_addr(Ok(Reply::Nil));
    assert_eq!(failed(d.on_master_addr(Ok(Reply::Nil))).kind(), ErrorKind::Connection);
}

#[test]
fn malformed_answers_are_passed_over() {
    let mut d = Discovery::new("m", vec![Endpoint::Tcp { host: "s1".into(), port: 1 }]);
    d.begin(None);
    let err = failed(d.on_master_addr(addr("h", "notaport")));
    assert!(err.message().contains("no usable address"), "{err}");
    d.begin(None);
    assert!(matches!(d.on_master_addr(Ok(Reply::Integer(3))), Next::Failed(_)));
    d.begin(None);
    let node = confirm(d.on_master_addr(addr("h", "1")));
    assert!(failed(d.on_role(&node, Ok(Reply::Simple(b"OK".to_vec())))).message().contains("ROLE answer"));
}

#[test]
fn switch_master_messages_name_the_new_primary_of_their_service() {
    let message = |channel: &str, payload: &str| Reply::Array(vec![bulk("message"), bulk(channel), bulk(payload)]);
    let m = message("+switch-master", "mymaster 10.0.0.5 6379 10.0.0.6 6380");
    assert_eq!(switch_master(&m, "mymaster"), Some(NodeAddr::new("10.0.0.6", 6380)));
    assert_eq!(switch_master(&m, "other"), None);
    assert_eq!(switch_master(&message("+sdown", "mymaster 10.0.0.5 6379 10.0.0.6 6380"), "mymaster"), None);
    assert_eq!(switch_master(&message("+switch-master", "mymaster 10.0.0.5"), "mymaster"), None);
    let confirmation = Reply::Array(vec![bulk("subscribe"), bulk("+switch-master"), Reply::Integer(1)]);
    assert_eq!(switch_master(&confirmation, "mymaster"), None);
}

#[test]
fn replicas_that_are_up_are_listed() {
    let entry = |ip: &str, port: &str, flags: &str, link: &str| {
        let mut fields =
            vec![bulk("name"), bulk("x"), bulk("ip"), bulk(ip), bulk("port"), bulk(port), bulk("flags"), bulk(flags)];
        if !link.is_empty() {
            fields.extend([bulk("master-link-status"), bulk(link)]);
        }
        Reply::Array(fields)
    };
    let reply = Reply::Array(vec![
        entry("10.0.0.7", "6379", "slave", "ok"),
        entry("10.0.0.8", "6379", "s_down,slave", "ok"),
        entry("10.0.0.9", "6379", "slave,disconnected", "ok"),
        entry("10.0.0.10", "x", "slave", "ok"),
        // The Sentinels' view of the link lags by up to 10 s: ROLE decides, not this.
        entry("10.0.0.11", "6379", "slave", "err"),
        entry("10.0.0.12", "6379", "slave", ""),
    ]);
    let listed = ["10.0.0.7", "10.0.0.11", "10.0.0.12"].map(|ip| NodeAddr::new(ip, 6379));
    assert_eq!(replicas(&reply), listed);
}

#[test]
fn a_replica_serves_reads_once_role_says_it_replicates_from_the_primary() {
    let primary = NodeAddr::new("10.0.0.1", 6379);
    let role = |parts: &[&str], port: Reply| {
        let mut parts: Vec<Reply> = parts.iter().map(|p| bulk(p)).collect();
        parts.insert(2, port);
        Reply::Array(parts)
    };
    let replicating = role(&["slave", "10.0.0.1", "connected", "1234"], Reply::Integer(6379));
    assert!(replicates_from(&replicating, &primary));
    for (parts, port) in [
        (vec!["slave", "10.0.0.1", "sync", "-1"], 6379), // a full resync: it would miss
        (vec!["slave", "10.0.0.1", "connecting", "-1"], 6379), // cut off from its primary
        (vec!["slave", "10.0.0.2", "connected", "1"], 6379), // another primary's replica
        (vec!["slave", "10.0.0.1", "connected", "1"], 6380),
    ] {
        assert!(!replicates_from(&role(&parts, Reply::Integer(port)), &primary), "{parts:?} {port}");
    }
    // A demoted primary that still says it is one.
    let master = Reply::Array(vec![bulk("master"), Reply::Integer(10), Reply::Array(Vec::new())]);
    assert!(!replicates_from(&master, &primary));
    assert!(!replicates_from(&Reply::Error(b"NOAUTH".to_vec()), &primary));
}

#[test]
fn resubscribing_backs_off_within_its_bound() {
    assert_eq!(resubscribe_delay(0), RESUBSCRIBE_DELAY);
    assert!(resubscribe_delay(1) > resubscribe_delay(0));
    assert_eq!(resubscribe_delay(40), MAX_RESUBSCRIBE_DELAY);
}

fn tls_refused(node: &str) -> Result<Reply, Error> {
    Err(Error::tls(&node, "the server's certificate is not valid for 10.0.0.5 (it lists wrong.example)"))
}

fn kept(next: Next) -> (NodeAddr, Error) {
    match next {
        Next::Kept(node, why) => (node, why),
        other => panic!("expected the primary in use to be kept, got {other:?}"),
    }
}

#[test]
fn a_node_named_by_several_sentinels_is_asked_once_in_a_round() {
    let mut d = Discovery::new("mymaster", sentinels());
    d.begin(None);
    let gone = confirm(d.on_master_addr(addr("10.0.0.5", "6379")));
    assert_eq!(asked(d.on_role(&gone, down("10.0.0.5:6379"))), "s2:26379");
    // The same node again: passed over with what it led to, without a second ROLE.
    assert_eq!(asked(d.on_master_addr(addr("10.0.0.5", "6379"))), "s3:26379");
    let err = failed(d.on_master_addr(addr("10.0.0.5", "6379")));
    assert_eq!(err.message().matches("named 10.0.0.5:6379, which did not confirm").count(), 3, "{err}");
    // A new round asks it again.
    d.begin(None);
    confirm(d.on_master_addr(addr("10.0.0.5", "6379")));
}

#[test]
fn with_no_sentinel_naming_another_node_the_primary_in_use_is_kept_while_role_says_so() {
    let in_use = NodeAddr::new("10.0.0.5", 6379);
    let mut d = Discovery::new("mymaster", sentinels());
    // Down, silent, or talking nonsense: nobody says the primary moved.
    d.begin(Some(&in_use));
    d.on_master_addr(down("s1"));
    d.on_master_addr(Err(Error::new(ErrorKind::Timeout, "timed out waiting for the reply to SENTINEL")));
    assert_eq!(confirm(d.on_master_addr(Ok(Reply::Integer(7)))), in_use);
    let (node, why) = kept(d.on_role(&in_use, role("master")));
    assert_eq!(node, in_use);
    assert!(why.message().starts_with("no primary is known") && why.message().contains("s3:26379"), "{why}");
    // The order is left alone: no Sentinel led anywhere.
    assert_eq!(asked(d.begin(Some(&in_use))), "s1:26379");
    // It does not say it is the primary any more: the round fails, saying so too.
    d.on_master_addr(down("s1"));
    d.on_master_addr(down("s2"));
    d.on_master_addr(down("s3"));
    let err = failed(d.on_role(&in_use, role("slave")));
    assert_eq!(err.kind(), ErrorKind::Connection);
    assert!(err.message().contains("the primary in use, 10.0.0.5:6379, did not confirm it still is"), "{err}");
    // A Sentinel named another node (here a replica): the Sentinels say the primary moved.
    d.begin(Some(&in_use));
    let other = confirm(d.on_master_addr(addr("10.0.0.6", "6379")));
    d.on_role(&other, role("slave"));
    d.on_master_addr(down("s2"));
    let err = failed(d.on_master_addr(down("s3")));
    assert!(err.message().contains("named 10.0.0.6:6379, which is a slave"), "{err}");
    // A Sentinel that names the primary in use, which does not confirm: no second question.
    d.begin(Some(&in_use));
    let named = confirm(d.on_master_addr(addr("10.0.0.5", "6379")));
    d.on_role(&named, down("10.0.0.5"));
    d.on_master_addr(down("s2"));
    assert!(matches!(d.on_master_addr(down("s3")), Next::Failed(_)));
}

#[test]
fn tls_or_data_credentials_refused_everywhere_are_errors_of_their_kind() {
    let mut d = Discovery::new("mymaster", sentinels());
    d.begin(None);
    let node = confirm(d.on_master_addr(addr("10.0.0.5", "6379")));
    d.on_role(&node, tls_refused("10.0.0.5:6379"));
    d.on_master_addr(addr("10.0.0.5", "6379"));
    // TLS with a Sentinel counts the same.
    let err = failed(d.on_master_addr(tls_refused("s3:26379")));
    assert_eq!(err.kind(), ErrorKind::Tls, "{err}");
    assert!(is_permanent(&err));
    for part in ["ssl_server_name", "s1:26379: named 10.0.0.5:6379", "wrong.example", "s3:26379: TLS with s3:26379"] {
        assert!(err.message().contains(part), "{part} missing: {err}");
    }
    // The data server's password, refused by the primary every Sentinel named.
    d.begin(None);
    let node = confirm(d.on_master_addr(addr("10.0.0.5", "6379")));
    d.on_role(&node, Err(Error::new(ErrorKind::Authentication, "authentication failed at 10.0.0.5:6379: WRONGPASS")));
    d.on_master_addr(addr("10.0.0.5", "6379"));
    let err = failed(d.on_master_addr(addr("10.0.0.5", "6379")));
    assert_eq!(err.kind(), ErrorKind::Authentication);
    assert!(err.message().starts_with("the primary the Sentinels named refused the data server's credentials"));
    // One of them down: a connection error, which says all of it.
    d.begin(None);
    let node = confirm(d.on_master_addr(addr("10.0.0.5", "6379")));
    d.on_role(&node, tls_refused("10.0.0.5:6379"));
    d.on_master_addr(down("s2"));
    assert_eq!(failed(d.on_master_addr(down("s3"))).kind(), ErrorKind::Connection);
    // A Sentinel's refusal, as an error reply after its address (NOPERM: an ACL without SENTINEL).
    d.begin(None);
    for _ in 0..2 {
        d.on_master_addr(Err(Error::new(ErrorKind::Server, "s1:26379: NOPERM this user has no permissions")));
    }
    let err = failed(d.on_master_addr(refused()));
    assert_eq!(err.kind(), ErrorKind::Authentication);
}

#[test]
fn what_a_sentinel_sends_shows_bounded_and_unusable_addresses_are_passed_over() {
    let long = "h".repeat(60_000);
    let huge = Reply::Array(vec![bulk("127.0.0.1"); 100_000]);
    let answers: Vec<(Result<Reply, Error>, &str)> = vec![
        (Ok(huge), "not [host, port]"),
        (addr(&long, "6379"), "named no usable address"),
        (addr("10.0.0.5\r\nX", "6379"), "named no usable address"),
        (addr("10.0.0.5 6379", "6379"), "named no usable address"),
        (addr("", "6379"), "named no usable address"),
        (addr("10.0.0.5", "0"), "named no usable address"),
        (Ok(Reply::Error(format!("ERR {long}").into_bytes())), "ERR hhh"),
        (Err(Error::new(ErrorKind::Protocol, long.clone())), "hhh"),
    ];
    for (answer, says) in answers {
        let mut d = Discovery::new("m", vec![Endpoint::Tcp { host: "s1".into(), port: 1 }]);
        d.begin(None);
        let err = failed(d.on_master_addr(answer));
        assert!(err.message().contains(says), "{says}: {err}");
        assert!(err.message().len() < 1024, "{} bytes: {}", err.message().len(), &err.message()[..200]);
    }
    // What a DNS name or an IP literal may be passes.
    for host in ["redis-1.example.internal", "10.0.0.5", "::1", "[::1]", &"a".repeat(253)] {
        let mut d = Discovery::new("m", vec![Endpoint::Tcp { host: "s1".into(), port: 1 }]);
        d.begin(None);
        confirm(d.on_master_addr(addr(host, "6379")));
    }
}
