//! The TLS session driven in memory, with no socket and no redis-server: against rustls's own
//! server (`ServerConnection`, an independent implementation of every record and message this
//! client sends), and against a hand-made server whose records the tests write themselves
//! (rustls runs its half of the handshake, then hands over its keys): coalesced and split
//! post-handshake messages, tampered, replayed, reordered, oversized, empty and unexpected
//! records. Every byte of data is checked.

use super::config::{TlsConfig, TlsOptions};
use super::record::{self, KeyLimit, Opener, Protocol, Sealer, content};
use super::session::{Input, Progress, TlsSession};
use super::traffic::MAX_RECORDS_WITHOUT_DATA;
use crate::error::ErrorKind;
use crate::net::{Endpoint, IoVecs};
use rustls::crypto::ring::cipher_suite as suites;
use rustls::kernel::KernelConnection;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{ConnectionState, EncodeError, UnbufferedStatus};
use rustls::{AlertDescription, ServerConfig, ServerConnection, SupportedCipherSuite};
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/net/tls/testdata").join(name)
}

/// A pattern of `len` bytes that differs with `seed`.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len as u64).map(|i| (i.wrapping_mul(31).wrapping_add(seed * 7) % 251) as u8).collect()
}

fn endpoint() -> Endpoint {
    Endpoint::Tcp { host: "localhost".into(), port: 6380 }
}

fn client_config() -> Arc<TlsConfig> {
    let options = TlsOptions { ca_certs: Some(testdata("ca.pem")), ..TlsOptions::new() };
    Arc::new(TlsConfig::new(options).unwrap())
}

fn session() -> TlsSession {
    TlsSession::new(&client_config(), &endpoint()).unwrap()
}

const TLS13: [SupportedCipherSuite; 3] =
    [suites::TLS13_AES_128_GCM_SHA256, suites::TLS13_AES_256_GCM_SHA384, suites::TLS13_CHACHA20_POLY1305_SHA256];
const TLS12: [SupportedCipherSuite; 3] = [
    suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    suites::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    suites::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
];

/// A server offering only `suite` (and so only its TLS version), presenting the test
/// certificate.
fn server_config(suite: SupportedCipherSuite, tickets: usize) -> Arc<ServerConfig> {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = vec![suite];
    let version = match suite {
        SupportedCipherSuite::Tls13(_) => &rustls::version::TLS13,
        SupportedCipherSuite::Tls12(_) => &rustls::version::TLS12,
    };
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(testdata("server.pem")).unwrap().collect::<Result<_, _>>().unwrap();
    let key = PrivateKeyDer::from_pem_file(testdata("server.key")).unwrap();
    let mut config = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[version])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.send_tls13_tickets = tickets;
    // The hand-made server takes its keys over as this client does.
    config.enable_secret_extraction = true;
    Arc::new(config)
}

/// Hands `bytes` to the session as a socket would (during the handshake).
fn push(client: &mut TlsSession, bytes: &[u8]) {
    let buf = client.receive_buffer();
    assert!(buf.len() >= bytes.len(), "the session has room for a flight");
    buf[..bytes.len()].copy_from_slice(bytes);
    client.received(bytes.len());
}

/// Feeds `bytes` to the session as a socket would, and reads what plaintext they complete.
fn feed(client: &mut TlsSession, bytes: &[u8]) -> io::Result<Vec<u8>> {
    let mut plaintext = Vec::new();
    let mut at = 0;
    loop {
        plaintext.extend(read_all(client)?);
        if at == bytes.len() {
            return Ok(plaintext);
        }
        let buf = client.receive_buffer();
        let n = buf.len().min(bytes.len() - at);
        assert!(n > 0, "the session has room for a record");
        buf[..n].copy_from_slice(&bytes[at..at + n]);
        client.received(n);
        at += n;
    }
}

/// The plaintext whole records hold, in pieces of at most 1000 bytes (as a parser takes them).
fn read_all(client: &mut TlsSession) -> io::Result<Vec<u8>> {
    let mut plaintext = Vec::new();
    while let Input::Data(_) = client.read(1000, |piece| plaintext.extend_from_slice(piece))? {}
    Ok(plaintext)
}

/// What the session has to send, as the socket took it.
fn take_output(client: &mut TlsSession) -> Vec<u8> {
    let bytes = client.pending_output().to_vec();
    client.output_taken(bytes.len());
    bytes
}

/// Seals `data` whole (one record per 16 KiB).
fn seal_all(client: &mut TlsSession, data: &[u8], wire: &mut Vec<u8>) {
    let mut iov = IoVecs::<1>::new();
    iov.push_slice(data);
    let mut sealed = 0;
    while sealed < data.len() {
        sealed += client.seal(&iov, sealed).unwrap();
        wire.extend(take_output(client));
    }
}

/// This client and rustls's server, talking through byte vectors.
struct WithRustls {
    client: TlsSession,
    server: ServerConnection,
    /// Plaintext the server received and the test has not looked at yet.
    received: Vec<u8>,
    /// The server read the client's close_notify.
    closed: bool,
}

impl WithRustls {
    fn new(suite: SupportedCipherSuite) -> WithRustls {
        WithRustls::with_client(session(), suite)
    }

    /// With the client's send keys renewed at `limit`.
    fn with_key_limit(limit: KeyLimit, suite: SupportedCipherSuite) -> WithRustls {
        let mut client = session();
        client.set_key_limit(limit);
        WithRustls::with_client(client, suite)
    }

    fn with_client(client: TlsSession, suite: SupportedCipherSuite) -> WithRustls {
        let mut server = ServerConnection::new(server_config(suite, 2)).unwrap();
        server.set_buffer_limit(None);
        let mut pair = WithRustls { client, server, received: Vec::new(), closed: false };
        pair.handshake();
        pair
    }

    fn handshake(&mut self) {
        for _ in 0..8 {
            let progress = self.client.handshake().expect("the handshake");
            let flight = take_output(&mut self.client);
            self.send_to_server(&flight).expect("the server takes the client's flight");
            if progress == Progress::Done && !self.server.is_handshaking() {
                return;
            }
            let answer = self.server_output();
            push(&mut self.client, &answer);
        }
        panic!("the handshake did not complete");
    }

    fn send_to_server(&mut self, mut bytes: &[u8]) -> Result<(), rustls::Error> {
        while !bytes.is_empty() {
            self.server.read_tls(&mut bytes).unwrap();
            self.server.process_new_packets()?;
            self.drain_server();
        }
        Ok(())
    }

    /// Takes the plaintext the server holds, so that it keeps taking records.
    fn drain_server(&mut self) {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match self.server.reader().read(&mut buf) {
                Ok(0) => return self.closed = true,
                Ok(n) => self.received.extend_from_slice(&buf[..n]),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return,
                Err(err) => panic!("the server's reader: {err}"),
            }
        }
    }

    fn server_output(&mut self) -> Vec<u8> {
        let mut bytes = Vec::new();
        while self.server.wants_write() {
            self.server.write_tls(&mut bytes).unwrap();
        }
        bytes
    }

    /// The plaintext the server received since the last look; `None` once it saw close_notify.
    fn server_reads(&mut self) -> Option<Vec<u8>> {
        self.drain_server();
        let plaintext = std::mem::take(&mut self.received);
        (!self.closed).then_some(plaintext)
    }

    /// The client sends `data`; what the server read of it.
    fn client_sends(&mut self, data: &[u8]) -> Vec<u8> {
        let mut wire = Vec::new();
        seal_all(&mut self.client, data, &mut wire);
        self.send_to_server(&wire).expect("the server opens every record");
        self.server_reads().unwrap()
    }

    /// The server sends `data`; what the client read of it.
    fn server_sends(&mut self, data: &[u8]) -> Vec<u8> {
        self.server.writer().write_all(data).unwrap();
        let wire = self.server_output();
        feed(&mut self.client, &wire).unwrap()
    }
}

#[test]
fn every_version_and_suite_round_trips_byte_exact_against_rustls() {
    for suite in TLS13.into_iter().chain(TLS12) {
        let mut pair = WithRustls::new(suite);
        for (i, len) in [1, 16_383, 16_384, 16_385, 100_003].into_iter().enumerate() {
            let sent = pattern(len, i as u64);
            assert!(pair.client_sends(&sent) == sent, "{suite:?}: {len} bytes to the server");
            let answer = pattern(len + 7, 100 + i as u64);
            assert!(pair.server_sends(&answer) == answer, "{suite:?}: {} bytes from the server", len + 7);
        }
    }
}

#[test]
fn session_tickets_are_handed_to_rustls_and_the_data_follows() {
    let mut pair = WithRustls::new(suites::TLS13_AES_128_GCM_SHA256);
    // rustls's server sends its two tickets once the client finished.
    let tickets = pair.server_output();
    assert!(!tickets.is_empty());
    assert_eq!(feed(&mut pair.client, &tickets).unwrap(), b"");
    assert_eq!(pair.client.counts().tickets, 2);
    assert_eq!(pair.server_sends(b"+OK\r\n"), b"+OK\r\n");
}

#[test]
fn a_key_update_the_server_asks_for_is_answered_and_both_directions_take_new_keys() {
    for suite in TLS13 {
        let mut pair = WithRustls::new(suite);
        for round in 1..=3 {
            pair.server.refresh_traffic_keys().unwrap();
            let answer = pattern(40_000, round);
            assert!(pair.server_sends(&answer) == answer, "{suite:?}: read with the server's new key");
            let counts = pair.client.counts();
            assert_eq!((counts.key_updates_received, counts.key_updates_sent), (round as u32, round as u32));
            // The answer (sealed before the client's data) lets the server open the rest.
            let sent = pattern(20_000, round + 10);
            assert!(pair.client_sends(&sent) == sent, "{suite:?}: sent with the client's new key");
        }
    }
}

#[test]
fn the_clients_send_key_is_renewed_past_its_limit_by_records_and_by_bytes() {
    // By records: every 4th small request starts a new key.
    let mut pair =
        WithRustls::with_key_limit(KeyLimit { records: 4, bytes: 1 << 40 }, suites::TLS13_AES_256_GCM_SHA384);
    for i in 0..20u64 {
        let del = format!("*2\r\n$3\r\nDEL\r\n$4\r\nk{i:03}\r\n").into_bytes();
        assert_eq!(pair.client_sends(&del), del, "request {i}");
    }
    assert_eq!(pair.client.counts().key_updates_sent, 4, "after records 4, 8, 12 and 16");
    assert!(!pair.client.must_drain(), "TLS 1.3 renews its key: it never drains");

    // By bytes: three full records per key.
    let mut pair = WithRustls::with_key_limit(
        KeyLimit { records: 1 << 40, bytes: 3 * record::MAX_PLAINTEXT as u64 },
        suites::TLS13_CHACHA20_POLY1305_SHA256,
    );
    let value = pattern(13 * record::MAX_PLAINTEXT, 5);
    assert!(pair.client_sends(&value) == value);
    assert_eq!(pair.client.counts().key_updates_sent, 4, "after records 3, 6, 9 and 12");
}

#[test]
fn a_tls12_send_key_at_its_limit_asks_for_a_drain_and_seals_nothing_past_the_headroom() {
    let mut pair = WithRustls::with_key_limit(
        KeyLimit { records: 3, bytes: 1 << 40 },
        suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    );
    for i in 0..3u8 {
        assert!(!pair.client.must_drain());
        assert_eq!(pair.client_sends(&[b'a' + i]), [b'a' + i]);
    }
    assert!(pair.client.must_drain(), "TLS 1.2 cannot renew the key: the connection drains");
    // The request being written is finished: the key seals on, through its headroom.
    let rest = pattern(3 * record::MAX_PLAINTEXT, 9);
    assert!(pair.client_sends(&rest) == rest);
    let mut iov = IoVecs::<1>::new();
    iov.push_slice(b"x");
    for _ in 6..3 + record::DRAIN_HEADROOM.records {
        assert_eq!(pair.client.seal(&iov, 0).unwrap(), 1);
        take_output(&mut pair.client);
    }
    let err = pair.client.seal(&iov, 0).unwrap_err();
    assert!(err.to_string().contains("sealed all it may"), "{err}");
    assert!(pair.client.seal(&iov, 0).is_err(), "and nothing after");

    // By bytes too: two full records reach a limit of two records' worth.
    let mut pair = WithRustls::with_key_limit(
        KeyLimit { records: 1 << 40, bytes: 2 * record::MAX_PLAINTEXT as u64 },
        suites::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    );
    let value = pattern(2 * record::MAX_PLAINTEXT - 1, 11);
    assert!(pair.client_sends(&value) == value);
    assert!(!pair.client.must_drain(), "one byte short of the limit");
    assert_eq!(pair.client_sends(b"x"), b"x");
    assert!(pair.client.must_drain(), "at the limit");
}

/// One suite of each version: what differs between them here is the record format (TLS 1.2
/// alerts travel in records of their own type, TLS 1.3's inside application data).
const BOTH_VERSIONS: [SupportedCipherSuite; 2] =
    [suites::TLS13_AES_128_GCM_SHA256, suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256];

#[test]
fn close_notify_ends_the_data_both_ways() {
    for suite in BOTH_VERSIONS {
        let mut pair = WithRustls::new(suite);
        let tickets = pair.server_output();
        feed(&mut pair.client, &tickets).unwrap();
        pair.server.writer().write_all(b"+last\r\n").unwrap();
        pair.server.send_close_notify();
        let wire = pair.server_output();
        assert_eq!(feed(&mut pair.client, &wire).unwrap(), b"+last\r\n", "{suite:?}");
        assert_eq!(pair.client.read(100, |_| panic!("no data")).unwrap(), Input::Closed { clean: true }, "{suite:?}");
        // The client says close_notify too; rustls's server reads it as the clean end.
        pair.client.close();
        let wire = take_output(&mut pair.client);
        pair.send_to_server(&wire).unwrap();
        assert_eq!(pair.server_reads(), None, "{suite:?}");
        assert!(pair.client.seal(&IoVecs::<1>::new(), 0).is_err(), "nothing is sealed after close_notify");
    }
}

#[test]
fn a_connection_cut_without_close_notify_is_not_clean_and_keeps_what_came_whole() {
    for suite in BOTH_VERSIONS {
        let mut pair = WithRustls::new(suite);
        let tickets = pair.server_output();
        feed(&mut pair.client, &tickets).unwrap();
        pair.server.writer().write_all(&pattern(30_000, 3)).unwrap();
        let wire = pair.server_output();
        // The cut falls in the second record: the first one's 16 KiB arrive, the rest does not.
        let cut = wire.len() - 100;
        let got = feed(&mut pair.client, &wire[..cut]).unwrap();
        assert!(got == pattern(30_000, 3)[..record::MAX_PLAINTEXT], "{suite:?}");
        pair.client.received(0);
        assert_eq!(pair.client.read(100, |_| panic!("no data")).unwrap(), Input::Closed { clean: false }, "{suite:?}");
    }
}

// -- a hand-made server: records the tests write themselves -------------------------------------

/// The server's side after a real handshake: its keys, for records the tests write.
struct HandMade {
    client: TlsSession,
    protocol: Protocol,
    sealer: Sealer,
    opener: Opener,
    kernel: KernelConnection<ServerConnectionData>,
}

impl HandMade {
    fn new(suite: SupportedCipherSuite) -> HandMade {
        let mut client = session();
        let mut server = UnbufferedServerConnection::new(server_config(suite, 0)).unwrap();
        let mut inbox: Vec<u8> = Vec::new();
        for _ in 0..8 {
            let progress = client.handshake().unwrap();
            inbox.extend(take_output(&mut client));
            let mut flight = Vec::new();
            loop {
                let UnbufferedStatus { discard, state } = server.process_tls_records(&mut inbox);
                let blocked = match state.expect("the server's handshake") {
                    ConnectionState::EncodeTlsData(mut encode) => {
                        let mut buf = vec![0u8; 16 << 10];
                        let n = match encode.encode(&mut buf) {
                            Ok(n) => n,
                            Err(EncodeError::InsufficientSize(size)) => panic!("{size:?}"),
                            Err(err) => panic!("{err}"),
                        };
                        flight.extend_from_slice(&buf[..n]);
                        false
                    }
                    ConnectionState::TransmitTlsData(transmit) => {
                        transmit.done();
                        false
                    }
                    ConnectionState::BlockedHandshake | ConnectionState::WriteTraffic(_) => true,
                    other => panic!("{other:?}"),
                };
                inbox.drain(..discard);
                if blocked {
                    break;
                }
            }
            push(&mut client, &flight);
            if progress == Progress::Done && !server.is_handshaking() {
                let (secrets, kernel) = server.dangerous_into_kernel_connection().unwrap();
                let protocol = record::protocol(matches!(suite, SupportedCipherSuite::Tls13(_)), &secrets.tx.1);
                return HandMade {
                    client,
                    protocol,
                    sealer: Sealer::new(protocol, secrets.tx.0, &secrets.tx.1, KeyLimit::default()),
                    opener: Opener::new(protocol, secrets.rx.0, &secrets.rx.1),
                    kernel,
                };
            }
        }
        panic!("the handshake did not complete");
    }

    /// One record of `typ` holding `plaintext`, sealed with the server's current key.
    fn record(&mut self, typ: u8, plaintext: &[u8]) -> Vec<u8> {
        let mut wire = Vec::new();
        self.sealer.seal(typ, [plaintext], &mut wire).unwrap();
        wire
    }

    /// The server's next records go with its next key.
    fn renew_send_key(&mut self) {
        let (seq, secrets) = self.kernel.update_tx_secret().unwrap();
        self.sealer = Sealer::new(self.protocol, seq, &secrets, KeyLimit::default());
    }

    /// What the client sent, record by record: (type, plaintext); a KeyUpdate from it makes
    /// the server take the client's next key.
    fn opens(&mut self, mut wire: Vec<u8>) -> Vec<(u8, Vec<u8>)> {
        let mut records = Vec::new();
        let mut at = 0;
        while at < wire.len() {
            let len = record::record_len(&wire[at..]).unwrap().unwrap();
            let opened = self.opener.open(&mut wire[at..at + len]).expect("the server opens the client's record");
            let plaintext = wire[at + opened.plaintext.start..at + opened.plaintext.end].to_vec();
            if opened.typ == content::HANDSHAKE && plaintext.first() == Some(&24) {
                let (seq, secrets) = self.kernel.update_rx_secret().unwrap();
                self.opener = Opener::new(self.protocol, seq, &secrets);
            }
            records.push((opened.typ, plaintext));
            at += len;
        }
        records
    }

    /// The client's answer so far, opened.
    fn client_answer(&mut self) -> Vec<(u8, Vec<u8>)> {
        let wire = take_output(&mut self.client);
        self.opens(wire)
    }
}

/// A NewSessionTicket body: lifetime, age_add, nonce, ticket, no extensions.
const TICKET: &[u8] = &[0, 0, 0, 60, 1, 2, 3, 4, 1, 9, 0, 4, b't', b'i', b'c', b'k', 0, 0];

fn message(typ: u8, body: &[u8]) -> Vec<u8> {
    let len = (body.len() as u32).to_be_bytes();
    [&[typ, len[1], len[2], len[3]][..], body].concat()
}

fn key_update(requested: bool) -> Vec<u8> {
    message(24, &[u8::from(requested)])
}

/// The error a read ends with, and the alert the client sealed about it (if any).
fn refused(server: &mut HandMade, wire: &[u8]) -> (String, Option<Vec<u8>>) {
    let err = feed(&mut server.client, wire).expect_err("the client refuses it");
    let alert = server.client_answer().into_iter().find(|(typ, _)| *typ == content::ALERT).map(|(_, alert)| alert);
    (err.to_string(), alert)
}

fn fatal(alert: AlertDescription) -> Option<Vec<u8>> {
    Some(vec![2, u8::from(alert)])
}

#[test]
fn a_key_update_coalesced_behind_a_ticket_is_taken_and_answered() {
    let mut server = HandMade::new(suites::TLS13_AES_128_GCM_SHA256);
    let messages = [message(4, TICKET), key_update(true)].concat();
    let mut wire = server.record(content::HANDSHAKE, &messages);
    server.renew_send_key();
    wire.extend(server.record(content::APPLICATION_DATA, b"+after the update\r\n"));
    assert_eq!(feed(&mut server.client, &wire).unwrap(), b"+after the update\r\n");
    let counts = server.client.counts();
    assert_eq!((counts.tickets, counts.key_updates_received, counts.key_updates_sent), (1, 1, 1));
    // The client's KeyUpdate, then its data under its new key.
    let mut sent = Vec::new();
    seal_all(&mut server.client, b"*1\r\n$4\r\nPING\r\n", &mut sent);
    let mut answer = server.client_answer();
    answer.extend(server.opens(sent));
    assert_eq!(
        answer,
        vec![(content::HANDSHAKE, key_update(false)), (content::APPLICATION_DATA, b"*1\r\n$4\r\nPING\r\n".to_vec())]
    );
}

#[test]
fn messages_split_across_records_are_joined() {
    let mut server = HandMade::new(suites::TLS13_CHACHA20_POLY1305_SHA256);
    let ticket = message(4, TICKET);
    let update = key_update(false);
    let mut wire = server.record(content::HANDSHAKE, &ticket[..3]);
    wire.extend(server.record(content::HANDSHAKE, &ticket[3..10]));
    wire.extend(server.record(content::HANDSHAKE, &[&ticket[10..], &update[..2]].concat()));
    wire.extend(server.record(content::HANDSHAKE, &update[2..]));
    server.renew_send_key();
    wire.extend(server.record(content::APPLICATION_DATA, b"$1\r\nx\r\n"));
    // Fed a byte at a time: records arrive in every split too.
    let mut got = Vec::new();
    for byte in wire.chunks(1) {
        got.extend(feed(&mut server.client, byte).unwrap());
    }
    assert_eq!(got, b"$1\r\nx\r\n");
    let counts = server.client.counts();
    assert_eq!((counts.tickets, counts.key_updates_received, counts.key_updates_sent), (1, 1, 0));
    assert_eq!(server.client_answer(), vec![], "update_not_requested: nothing to answer");
}

#[test]
fn post_handshake_messages_out_of_place_end_the_connection_with_unexpected_message() {
    let unexpected = fatal(AlertDescription::UnexpectedMessage);
    // Something after a KeyUpdate in its record (the keys change with the next record).
    let mut server = HandMade::new(suites::TLS13_AES_128_GCM_SHA256);
    let wire = server.record(content::HANDSHAKE, &[key_update(false), message(4, TICKET)].concat());
    let (err, alert) = refused(&mut server, &wire);
    assert!(err.contains("a KeyUpdate not at the end of its record"), "{err}");
    assert_eq!(alert, unexpected);
    // A split message interleaved with data.
    let mut server = HandMade::new(suites::TLS13_AES_128_GCM_SHA256);
    let mut wire = server.record(content::HANDSHAKE, &message(4, TICKET)[..5]);
    wire.extend(server.record(content::APPLICATION_DATA, b"+OK\r\n"));
    let (err, alert) = refused(&mut server, &wire);
    assert!(err.contains("interleaved"), "{err}");
    assert_eq!(alert, unexpected);
    // A handshake message TLS 1.3 does not send after the handshake (a CertificateRequest).
    let mut server = HandMade::new(suites::TLS13_AES_128_GCM_SHA256);
    let wire = server.record(content::HANDSHAKE, &message(13, &[0, 0, 0]));
    let (err, alert) = refused(&mut server, &wire);
    assert!(err.contains("type 13"), "{err}");
    assert_eq!(alert, unexpected);
    // A KeyUpdate asking for neither.
    let mut server = HandMade::new(suites::TLS13_AES_128_GCM_SHA256);
    let wire = server.record(content::HANDSHAKE, &message(24, &[7]));
    assert_eq!(refused(&mut server, &wire).1, fatal(AlertDescription::IllegalParameter));
}

#[test]
fn a_tls12_renegotiation_request_and_warnings_are_declined_by_ignoring_them() {
    let mut server = HandMade::new(suites::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256);
    let mut wire = server.record(content::HANDSHAKE, &message(0, &[]));
    wire.extend(server.record(content::ALERT, &[1, u8::from(AlertDescription::NoRenegotiation)]));
    wire.extend(server.record(content::APPLICATION_DATA, b"+OK\r\n"));
    assert_eq!(feed(&mut server.client, &wire).unwrap(), b"+OK\r\n");
    assert_eq!(server.client_answer(), vec![], "nothing answered");
    // A fatal one ends it, and one about this client's certificate says so.
    let wire = server.record(content::ALERT, &[2, u8::from(AlertDescription::CertificateRequired)]);
    let (err, alert) = refused(&mut server, &wire);
    assert_eq!(err, "the server sent the TLS alert CertificateRequired");
    assert_eq!(alert, None, "no alert answers the server's");
    let refusal = server.client.refusal().expect("a refusal to report");
    assert_eq!(refusal.kind(), ErrorKind::Tls);
    assert!(
        refusal
            .message()
            .ends_with("requires a client certificate (tls-auth-clients yes): set ssl_certfile and ssl_keyfile")
    );
}

#[test]
fn a_tampered_replayed_or_reordered_record_fails_authentication_with_bad_record_mac() {
    for suite in [suites::TLS13_AES_256_GCM_SHA384, suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256] {
        let records = |server: &mut HandMade| -> Vec<Vec<u8>> {
            (0..3u8).map(|i| server.record(content::APPLICATION_DATA, &[b'a' + i; 100])).collect()
        };
        // A flipped bit: the record before it is delivered, then the connection ends.
        let mut server = HandMade::new(suite);
        let [one, mut two, three] = <[Vec<u8>; 3]>::try_from(records(&mut server)).unwrap();
        two[30] ^= 0x10;
        assert_eq!(feed(&mut server.client, &one).unwrap(), [b'a'; 100]);
        let (err, alert) = refused(&mut server, &[two, three].concat());
        assert!(err.contains("failed authentication"), "{suite:?}: {err}");
        assert_eq!(alert, fatal(AlertDescription::BadRecordMac), "{suite:?}");
        assert!(server.client.read(10, |_| panic!("nothing after it")).is_err(), "the session takes nothing more");
        // Replayed.
        let mut server = HandMade::new(suite);
        let [one, _, _] = <[Vec<u8>; 3]>::try_from(records(&mut server)).unwrap();
        assert_eq!(feed(&mut server.client, &one).unwrap(), [b'a'; 100]);
        assert_eq!(refused(&mut server, &one).1, fatal(AlertDescription::BadRecordMac), "{suite:?}: replayed");
        // Reordered.
        let mut server = HandMade::new(suite);
        let [one, two, _] = <[Vec<u8>; 3]>::try_from(records(&mut server)).unwrap();
        assert_eq!(refused(&mut server, &[two, one].concat()).1, fatal(AlertDescription::BadRecordMac), "{suite:?}");
    }
}

#[test]
fn oversized_zero_length_and_foreign_records_get_the_rfcs_alert() {
    for (suite, max_body) in [
        (suites::TLS13_AES_128_GCM_SHA256, record::MAX_BODY_TLS13),
        (suites::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, record::MAX_BODY),
    ] {
        let oversized = [&[content::APPLICATION_DATA, 3, 3][..], &((max_body + 1) as u16).to_be_bytes()].concat();
        let mut server = HandMade::new(suite);
        let (err, alert) = refused(&mut server, &oversized);
        assert!(err.contains("longer than TLS allows"), "{err}");
        assert_eq!(alert, fatal(AlertDescription::RecordOverflow), "{suite:?}");
        // No body at all: not even a tag to check.
        let mut server = HandMade::new(suite);
        assert_eq!(
            refused(&mut server, &[content::APPLICATION_DATA, 3, 3, 0, 0]).1,
            fatal(AlertDescription::BadRecordMac)
        );
        // A zero-length handshake fragment (RFC 8446 5.1 forbids them).
        let mut server = HandMade::new(suite);
        let wire = server.record(content::HANDSHAKE, b"");
        assert_eq!(refused(&mut server, &wire).1, fatal(AlertDescription::UnexpectedMessage), "{suite:?}");
        // A change_cipher_spec after the handshake.
        let mut server = HandMade::new(suite);
        assert_eq!(refused(&mut server, &[20, 3, 3, 0, 1, 1]).1, fatal(AlertDescription::UnexpectedMessage));
        // Not a record at all.
        let mut server = HandMade::new(suite);
        assert_eq!(refused(&mut server, b"-ERR injected\r\n").1, fatal(AlertDescription::DecodeError));
    }
}

#[test]
fn empty_records_are_taken_up_to_a_bound_in_a_row() {
    for suite in BOTH_VERSIONS {
        let mut server = HandMade::new(suite);
        for round in 0..3 {
            let mut wire: Vec<u8> =
                (0..MAX_RECORDS_WITHOUT_DATA).flat_map(|_| server.record(content::APPLICATION_DATA, b"")).collect();
            wire.extend(server.record(content::APPLICATION_DATA, b"+OK\r\n"));
            assert_eq!(feed(&mut server.client, &wire).unwrap(), b"+OK\r\n", "{suite:?} round {round}: data resets");
        }
        let wire: Vec<u8> =
            (0..=MAX_RECORDS_WITHOUT_DATA).flat_map(|_| server.record(content::APPLICATION_DATA, b"")).collect();
        let (err, alert) = refused(&mut server, &wire);
        let bound = format!("more than {MAX_RECORDS_WITHOUT_DATA} TLS records in a row without data");
        assert!(err.contains(&bound), "{suite:?}: {err}");
        assert_eq!(alert, fatal(AlertDescription::UnexpectedMessage), "{suite:?}");
    }
}

#[test]
fn data_after_close_notify_is_ignored() {
    for suite in BOTH_VERSIONS {
        let mut server = HandMade::new(suite);
        let mut wire = server.record(content::APPLICATION_DATA, b"+OK\r\n");
        wire.extend(server.record(content::ALERT, &[1, 0]));
        wire.extend(server.record(content::APPLICATION_DATA, b"+forged\r\n"));
        assert_eq!(feed(&mut server.client, &wire).unwrap(), b"+OK\r\n", "{suite:?}");
        assert_eq!(
            server.client.read(100, |_| panic!("nothing after close_notify")).unwrap(),
            Input::Closed { clean: true },
            "{suite:?}"
        );
    }
}

#[test]
fn a_close_notify_the_servers_key_did_not_seal_cannot_cut_the_data_short() {
    // On the path, a truncation attack forges the end of the data: a close_notify in the
    // clear, or one sealed with a key that is not the server's. Either ends the connection
    // as broken, never as a clean end after a short reply.
    let clear = [content::ALERT, 3, 3, 0, 2, 1, 0];
    for (suite, alert) in [
        // TLS 1.3 takes no unencrypted record after the handshake (RFC 8446 5).
        (suites::TLS13_AES_128_GCM_SHA256, AlertDescription::UnexpectedMessage),
        // TLS 1.2 alerts are records of their own, and this one fails authentication.
        (suites::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, AlertDescription::BadRecordMac),
    ] {
        let mut server = HandMade::new(suite);
        let head = server.record(content::APPLICATION_DATA, b"$5\r\nab");
        assert_eq!(feed(&mut server.client, &head).unwrap(), b"$5\r\nab", "{suite:?}");
        let (err, sent) = refused(&mut server, &clear);
        assert_eq!(sent, fatal(alert), "{suite:?}: {err}");
        assert!(server.client.read(10, |_| panic!("nothing after it")).is_err(), "{suite:?}: not a clean end");
        // Sealed with another connection's key, in its right place in the sequence.
        let mut server = HandMade::new(suite);
        let mut other = HandMade::new(suite);
        let head = server.record(content::APPLICATION_DATA, b"$5\r\nab");
        other.record(content::APPLICATION_DATA, b"$5\r\nab");
        let forged = other.record(content::ALERT, &[1, 0]);
        assert_eq!(feed(&mut server.client, &head).unwrap(), b"$5\r\nab", "{suite:?}");
        let (err, sent) = refused(&mut server, &forged);
        assert!(err.contains("failed authentication"), "{suite:?}: {err}");
        assert_eq!(sent, fatal(AlertDescription::BadRecordMac), "{suite:?}");
        assert!(server.client.read(10, |_| panic!("nothing after it")).is_err(), "{suite:?}: not a clean end");
    }
}

#[test]
fn a_socket_that_never_drains_keeps_the_outgoing_buffer_bounded() {
    let mut pair = WithRustls::new(suites::TLS13_AES_128_GCM_SHA256);
    let value = pattern(8 << 20, 4);
    let mut iov = IoVecs::<1>::new();
    iov.push_slice(&value);
    let (mut sealed, mut wire, mut largest) = (0, Vec::new(), 0);
    while sealed < value.len() || pair.client.wants_write() {
        sealed += pair.client.seal(&iov, sealed).unwrap();
        largest = largest.max(pair.client.outgoing_len());
        // The socket takes a third of what waits, never all of it.
        let pending = pair.client.pending_output();
        let take = (pending.len() / 3).max(1).min(pending.len());
        wire.extend_from_slice(&pending[..take]);
        pair.client.output_taken(take);
    }
    assert!(largest <= 3 * (256 << 10), "the outgoing buffer grew to {largest} bytes");
    pair.send_to_server(&wire).unwrap();
    assert!(pair.server_reads().unwrap() == value, "every byte arrived in order");
}

// -- the handshake's failures ------------------------------------------------------------------

/// The client's hello, and the server's first flight (from ServerHello on).
fn first_flight(suite: SupportedCipherSuite) -> (TlsSession, ServerConnection, Vec<u8>) {
    let mut client = session();
    let mut server = ServerConnection::new(server_config(suite, 0)).unwrap();
    assert_eq!(client.handshake().unwrap(), Progress::Pending);
    let hello = take_output(&mut client);
    server.read_tls(&mut &hello[..]).unwrap();
    server.process_new_packets().unwrap();
    let mut flight = Vec::new();
    while server.wants_write() {
        server.write_tls(&mut flight).unwrap();
    }
    (client, server, flight)
}

fn handshake_fails(client: &mut TlsSession, bytes: &[u8]) -> super::Failure {
    push(client, bytes);
    client.handshake().expect_err("the handshake fails")
}

#[test]
fn what_the_path_does_to_a_handshake_is_transient_and_the_server_hears_why() {
    // A bit flipped in the ServerHello's random: the keys differ, the next record fails (and
    // the client's alert, under its own handshake key, is one the server cannot read).
    let (mut client, _, mut flight) = first_flight(suites::TLS13_AES_128_GCM_SHA256);
    flight[5 + 4 + 2 + 10] ^= 0x01;
    let failure = handshake_fails(&mut client, &flight);
    assert!(!failure.permanent, "{}", failure.error);
    assert_eq!(failure.error.kind(), ErrorKind::Connection);
    assert!(failure.error.message().contains("did not decrypt"), "{}", failure.error);
    // A bit flipped in an encrypted handshake record (after the ServerHello): the server hears
    // why.
    let (mut client, mut server, mut flight) = first_flight(suites::TLS13_AES_128_GCM_SHA256);
    let hello_len = record::record_len(&flight).unwrap().unwrap();
    let last = flight.len() - 1;
    assert!(last > hello_len);
    flight[last] ^= 0x80;
    let failure = handshake_fails(&mut client, &flight);
    assert!(!failure.permanent && failure.error.message().contains("did not decrypt"), "{}", failure.error);
    let alert = take_output(&mut client);
    server.read_tls(&mut &alert[..]).unwrap();
    let heard = server.process_new_packets();
    assert!(matches!(heard, Err(rustls::Error::AlertReceived(AlertDescription::BadRecordMac))), "{heard:?}");
    // A plaintext alert forged before the ServerHello.
    let mut forged = session();
    forged.handshake().unwrap();
    let failure = handshake_fails(&mut forged, &[21, 3, 3, 0, 2, 2, 40]);
    assert!(!failure.permanent, "{}", failure.error);
    assert!(failure.error.message().contains("sent the alert HandshakeFailure"), "{}", failure.error);
    // Cut: the server closed mid-handshake.
    let (mut client, _, flight) = first_flight(suites::TLS13_AES_128_GCM_SHA256);
    push(&mut client, &flight[..40]);
    client.received(0);
    let failure = client.handshake().unwrap_err();
    assert!(!failure.permanent);
    assert!(failure.error.message().ends_with("the server closed the connection during the TLS handshake"));
}

#[test]
fn plaintext_first_bytes_are_held_up_for_the_plaintext_check() {
    let mut client = session();
    client.handshake().unwrap();
    let failure = handshake_fails(&mut client, b"-ERR injected\r\n");
    assert_eq!(failure.plaintext_reply.as_deref(), Some("-ERR injected\\r\\n"));
    assert!(failure.error.message().contains("this port does not speak TLS"), "{}", failure.error);
}

#[test]
fn a_version_one_server_certificate_is_refused_saying_how_to_reissue_it() {
    let mut provider = rustls::crypto::ring::default_provider();
    provider.cipher_suites = vec![suites::TLS13_AES_128_GCM_SHA256];
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(testdata("server-v1.pem")).unwrap().collect::<Result<_, _>>().unwrap();
    let key = provider.key_provider.load_private_key(PrivateKeyDer::from_pem_file(testdata("server.key")).unwrap());
    // rustls's own server will not parse it either: it is handed over as it is.
    let identity = rustls::sign::CertifiedKey::new(chain, key.unwrap());
    let config = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(identity)));
    let handshake = |client: &mut TlsSession| -> Result<(), super::Failure> {
        let mut server = ServerConnection::new(Arc::new(config.clone())).unwrap();
        for _ in 0..6 {
            if client.handshake()? == Progress::Done {
                return Ok(());
            }
            let hello = take_output(client);
            if !hello.is_empty() {
                server.read_tls(&mut &hello[..]).unwrap();
                server.process_new_packets().unwrap();
            }
            let mut flight = Vec::new();
            while server.wants_write() {
                server.write_tls(&mut flight).unwrap();
            }
            push(client, &flight);
        }
        panic!("no end");
    };
    let failure = handshake(&mut session()).unwrap_err();
    assert!(failure.permanent, "the server's certificate decides");
    let message = failure.error.message();
    assert!(message.contains("the server's certificate is X.509 version 1"), "{message}");
    assert!(message.contains("subjectAltName=DNS:localhost"), "{message}");
    // Nothing verified (ssl_cert_reqs="none"): accepted, its key still checked to have signed.
    let options = TlsOptions { verify_certificate: false, ..TlsOptions::new() };
    let mut unverified = TlsSession::new(&Arc::new(TlsConfig::new(options).unwrap()), &endpoint()).unwrap();
    handshake(&mut unverified).unwrap();
}
