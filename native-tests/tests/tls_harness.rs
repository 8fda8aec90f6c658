//! The harness's TLS servers and clusters themselves: what they listen on, whom they let in.

use redis_harness::{AuthClients, RedisCluster, RedisServer, ServerCert, ServerConfig, TlsServer, tls_or_skip};
use std::process::{Command, Stdio};

fn tls_server(tls: TlsServer) -> RedisServer {
    RedisServer::start_with(ServerConfig { tls: Some(tls), ..ServerConfig::default() })
}

/// `openssl s_client` against `port` with `args`: whether the server answered PING.
fn ping_with_openssl(port: u16, args: &[&std::ffi::OsStr]) -> bool {
    let mut command = Command::new("openssl");
    command.args(["s_client", "-quiet", "-connect", &format!("127.0.0.1:{port}")]).args(args);
    let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"PING\r\nQUIT\r\n").ok();
    child.wait_with_output().unwrap().stdout.starts_with(b"+PONG\r\n")
}

#[test]
fn a_tls_server_answers_over_tls_only_and_survives_a_restart() {
    if !tls_or_skip("a_tls_server_answers_over_tls_only_and_survives_a_restart") {
        return;
    }
    let mut server = tls_server(TlsServer::default());
    assert_eq!(server.url(), format!("rediss://127.0.0.1:{}", server.port()));
    assert!(server.certs().ca.is_file() && server.certs().client_key.is_file());
    assert_eq!(server.raw_command(&[b"PING"]), b"+PONG\r\n");
    assert_eq!(server.raw_command(&[b"CONFIG", b"GET", b"port"]), b"*2\r\n$4\r\nport\r\n$1\r\n0\r\n");
    server.raw_command(&[b"SET", b"k", b"v"]);
    assert!(server.stat_as(None, "total_commands_processed") >= 2);
    server.restart();
    assert_eq!(server.raw_command(&[b"DBSIZE"]), b":0\r\n");
}

#[test]
fn a_mutual_tls_server_lets_in_only_clients_with_the_test_cas_certificate() {
    if !tls_or_skip("a_mutual_tls_server_lets_in_only_clients_with_the_test_cas_certificate") {
        return;
    }
    let server = tls_server(TlsServer { auth_clients: AuthClients::Yes, ..TlsServer::default() });
    let certs = server.certs();
    let ca = [std::ffi::OsStr::new("-CAfile"), certs.ca.as_os_str()];
    assert!(!ping_with_openssl(server.port(), &ca), "no client certificate");
    let client = [certs.client_cert.as_os_str(), certs.client_key.as_os_str()];
    let other = [certs.other_client_cert.as_os_str(), certs.other_client_key.as_os_str()];
    for (pair, welcome) in [(client, true), (other, false)] {
        let args = [ca[0], ca[1], "-cert".as_ref(), pair[0], "-key".as_ref(), pair[1]];
        assert_eq!(ping_with_openssl(server.port(), &args), welcome, "{pair:?}");
    }
    // The harness's own path presents the client certificate.
    assert_eq!(server.raw_command(&[b"PING"]), b"+PONG\r\n");
}

#[test]
fn a_tls_server_presents_the_certificate_asked_for() {
    if !tls_or_skip("a_tls_server_presents_the_certificate_asked_for") {
        return;
    }
    for presents in [ServerCert::Expired, ServerCert::WrongHost] {
        let server = tls_server(TlsServer { presents, ..TlsServer::default() });
        let certs = server.certs();
        let verified = ["-verify_return_error".as_ref(), "-CAfile".as_ref(), certs.ca.as_os_str()];
        let by_name = [verified[0], verified[1], verified[2], "-verify_ip".as_ref(), "127.0.0.1".as_ref()];
        match presents {
            ServerCert::Expired => assert!(!ping_with_openssl(server.port(), &verified), "expired, yet verified"),
            _ => {
                assert!(ping_with_openssl(server.port(), &verified), "signed by the test CA");
                assert!(!ping_with_openssl(server.port(), &by_name), "not for 127.0.0.1, yet verified");
            }
        }
        // Still reachable for the harness's own checks.
        assert_eq!(server.raw_command(&[b"PING"]), b"+PONG\r\n");
    }
}

#[test]
fn a_tls_cluster_announces_its_tls_ports() {
    if !tls_or_skip("a_tls_cluster_announces_its_tls_ports") {
        return;
    }
    let cluster = RedisCluster::start_tls(3, 0, AuthClients::Yes);
    assert!(cluster.seed_url().starts_with("rediss://127.0.0.1:"));
    let slots =
        String::from_utf8_lossy(&cluster.raw_command(&cluster.nodes()[0], &[b"CLUSTER", b"SLOTS"])).into_owned();
    for node in cluster.nodes() {
        assert!(slots.contains(&format!(":{}\r\n", node.port)), "{} not in {slots:?}", node.port);
    }
    assert_eq!(cluster.primaries().len(), 3);
    assert_eq!(cluster.cli(&["SET", "k", "v"]).trim(), "OK");
    assert_eq!(cluster.cli(&["GET", "k"]).trim(), "v");
}
