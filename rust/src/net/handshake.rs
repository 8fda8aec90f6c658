//! What is said on every new connection before any data moves: AUTH, SELECT, READONLY (cluster
//! replica reads), HELLO, PING.
//! Shared by every connection type, and judged here: which failures are permanent (never
//! retried) and which are worth a reconnect.

use super::options::ConnectOptions;
use crate::error::{Error, ErrorKind};
use crate::resp::{Command, Reply};
use crate::secret::Secret;

/// One command of the handshake, in the order they are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `AUTH [username] password`, when a password is set.
    Auth,
    /// `SELECT db`, when the database is not 0.
    Select,
    /// `READONLY`, when reads go to cluster replicas (`read_from="prefer_replica"`). Sent to
    /// primaries too: it changes nothing there, and a primary demoted to a replica later keeps
    /// serving reads instead of redirecting them.
    ReadOnly,
    /// `HELLO 2`, always: which server this is (see [`super::server`]). A server that refuses it
    /// (before Redis 6, or where it is renamed or denied) is served all the same.
    Hello,
    /// `PING`, always: the connection is ready once it answers.
    Ping,
}

/// The handshake commands for these options, in order, each as its encoded frame.
pub fn commands(options: &ConnectOptions) -> Vec<(Step, Vec<u8>)> {
    let mut steps = Vec::with_capacity(4);
    if let Some(password) = &options.password {
        let username = options.username.as_deref().map(str::as_bytes);
        let auth = Command::Auth { username, password: password.expose().as_bytes() };
        steps.push((Step::Auth, auth.header()));
    }
    if options.db != 0 {
        steps.push((Step::Select, Command::Select { db: options.db }.header()));
    }
    if options.readonly {
        steps.push((Step::ReadOnly, Command::ReadOnly.header()));
    }
    steps.push((Step::Hello, Command::Hello.header()));
    steps.push((Step::Ping, Command::Ping.header()));
    steps
}

/// What a handshake reply means for the connection.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The step succeeded: go on to the next one (or to the data).
    Proceed,
    /// Reconnecting will not help (bad credentials, no such database).
    Permanent(Error),
    /// The server is not ready yet (loading its dataset, busy script): reconnect later.
    Transient(Error),
}

/// Judges one handshake reply. A server may echo the AUTH arguments back (an unknown or
/// renamed AUTH command: "with args beginning with: 'the-password'"), so the password is
/// scrubbed from every reply text before any of it goes into an error.
pub fn judge(step: Step, reply: &Reply, options: &ConnectOptions) -> Verdict {
    let Some(password) = &options.password else { return judge_reply(step, reply, options) };
    judge_reply(step, &scrubbed(reply, password), options)
}

/// `reply` with every occurrence of the password replaced, in arrays too: a reply of any shape
/// may end up in an error ("unexpected reply to Auth ...").
fn scrubbed(reply: &Reply, password: &Secret) -> Reply {
    match reply {
        Reply::Error(text) => Reply::Error(password.scrub(text)),
        Reply::Simple(text) => Reply::Simple(password.scrub(text)),
        Reply::Bulk(text) => Reply::Bulk(password.scrub(text)),
        Reply::Array(items) => Reply::Array(items.iter().map(|item| scrubbed(item, password)).collect()),
        other => other.clone(),
    }
}

fn judge_reply(step: Step, reply: &Reply, options: &ConnectOptions) -> Verdict {
    let endpoint = &options.endpoint;
    match (step, reply) {
        (Step::Auth | Step::Select | Step::ReadOnly, Reply::Simple(ok)) if ok == b"OK" => Verdict::Proceed,
        (Step::Ping, Reply::Simple(pong)) if pong == b"PONG" => Verdict::Proceed,
        (_, Reply::Error(text)) if is_transient(text) => {
            Verdict::Transient(Error::server(text).context(format!("{endpoint} is not ready")))
        }
        (Step::Auth, Reply::Error(text)) => Verdict::Permanent(Error::new(
            ErrorKind::Authentication,
            format!(
                "authentication failed at {endpoint} (user {:?}): {}",
                options.username.as_deref().unwrap_or("default"),
                String::from_utf8_lossy(text)
            ),
        )),
        (_, Reply::Error(text)) if text.starts_with(b"NOAUTH") => Verdict::Permanent(Error::new(
            ErrorKind::Authentication,
            format!("{endpoint} requires authentication and no password was given: {}", String::from_utf8_lossy(text)),
        )),
        // What a server is only shapes how large values are read; not knowing is no failure.
        (Step::Hello, _) => Verdict::Proceed,
        (Step::ReadOnly, Reply::Error(text)) => Verdict::Permanent(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "{endpoint} refused READONLY, which reads from cluster replicas need: {} (use \
                 read_from=\"primary\", or check that it is a cluster node and the user may run READONLY)",
                String::from_utf8_lossy(text)
            ),
        )),
        (Step::Select, Reply::Error(text)) => Verdict::Permanent(Error::new(
            ErrorKind::InvalidInput,
            format!("cannot select database {} at {endpoint}: {}", options.db, String::from_utf8_lossy(text)),
        )),
        (_, Reply::Error(text)) => {
            Verdict::Permanent(Error::server(text).context(format!("{endpoint} refused {step:?}")))
        }
        (_, other) => Verdict::Transient(Error::new(
            ErrorKind::Protocol,
            format!("unexpected reply to {step:?} from {endpoint}: {other:?}"),
        )),
    }
}

fn is_transient(text: &[u8]) -> bool {
    ["LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN"].iter().any(|code| text.starts_with(code.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Endpoint;

    fn options(password: Option<&str>, username: Option<&str>, db: u32) -> ConnectOptions {
        let mut options = ConnectOptions::new(Endpoint::Tcp { host: "h".into(), port: 1 });
        options.password = password.map(Secret::new);
        options.username = username.map(String::from);
        options.db = db;
        options
    }

    #[test]
    fn commands_follow_the_options() {
        let steps: Vec<Step> = commands(&options(None, None, 0)).into_iter().map(|s| s.0).collect();
        assert_eq!(steps, [Step::Hello, Step::Ping]);
        let all = commands(&options(Some("pw"), Some("u"), 3));
        assert_eq!(all.iter().map(|s| s.0).collect::<Vec<_>>(), [Step::Auth, Step::Select, Step::Hello, Step::Ping]);
        assert_eq!(all[0].1, b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$2\r\npw\r\n");
        assert_eq!(all[1].1, b"*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n");
        assert_eq!(all[2].1, b"*2\r\n$5\r\nHELLO\r\n$1\r\n2\r\n");
        let mut replica_reads = options(Some("pw"), None, 0);
        replica_reads.readonly = true;
        let steps = commands(&replica_reads);
        assert_eq!(
            steps.iter().map(|s| s.0).collect::<Vec<_>>(),
            [Step::Auth, Step::ReadOnly, Step::Hello, Step::Ping]
        );
        assert_eq!(steps[1].1, b"*1\r\n$8\r\nREADONLY\r\n");
    }

    #[test]
    fn readonly_refused_is_permanent_and_says_what_to_do() {
        let opts = options(None, None, 0);
        assert_eq!(judge(Step::ReadOnly, &Reply::Simple(b"OK".to_vec()), &opts), Verdict::Proceed);
        let refused = Reply::Error(b"ERR This instance has cluster support disabled".to_vec());
        let Verdict::Permanent(err) = judge(Step::ReadOnly, &refused, &opts) else { panic!() };
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(
            err.message().contains("h:1 refused READONLY") && err.message().contains("read_from=\"primary\""),
            "{err}"
        );
    }

    #[test]
    fn verdicts() {
        let opts = options(Some("hunter2"), None, 0);
        let wrongpass = Reply::Error(b"WRONGPASS invalid username-password pair or user is disabled.".to_vec());
        let Verdict::Permanent(err) = judge(Step::Auth, &wrongpass, &opts) else { panic!() };
        assert_eq!(err.kind(), ErrorKind::Authentication);
        assert!(err.message().contains("authentication failed at h:1"), "{err}");
        assert!(!err.message().contains("hunter2"));

        let noauth = Reply::Error(b"NOAUTH Authentication required.".to_vec());
        let Verdict::Permanent(err) = judge(Step::Ping, &noauth, &opts) else { panic!() };
        assert_eq!(err.kind(), ErrorKind::Authentication);

        let loading = Reply::Error(b"LOADING Redis is loading the dataset in memory".to_vec());
        assert!(matches!(judge(Step::Ping, &loading, &opts), Verdict::Transient(_)));

        let range = Reply::Error(b"ERR DB index is out of range".to_vec());
        let Verdict::Permanent(err) = judge(Step::Select, &range, &opts) else { panic!() };
        assert!(err.message().contains("cannot select database 0"), "{err}");

        assert_eq!(judge(Step::Ping, &Reply::Simple(b"PONG".to_vec()), &opts), Verdict::Proceed);
        // HELLO is a question, not a gate: a server before Redis 6 (or one that denies it) is
        // served without knowing what it is. Only what would fail every command still fails.
        let unknown = Reply::Error(b"ERR unknown command 'HELLO', with args beginning with: '2'".to_vec());
        assert_eq!(judge(Step::Hello, &unknown, &opts), Verdict::Proceed);
        assert_eq!(judge(Step::Hello, &Reply::Array(vec![]), &opts), Verdict::Proceed);
        assert!(matches!(judge(Step::Hello, &noauth, &opts), Verdict::Permanent(_)));
        assert!(matches!(judge(Step::Hello, &loading, &opts), Verdict::Transient(_)));
        assert!(matches!(judge(Step::Ping, &Reply::Integer(1), &opts), Verdict::Transient(_)));

        let echo = Reply::Error(b"ERR unknown command 'AUTH', with args beginning with: 'hunter2'".to_vec());
        let Verdict::Permanent(err) = judge(Step::Auth, &echo, &opts) else { panic!() };
        assert!(!err.message().contains("hunter2") && err.message().contains("'***'"), "{err}");
        let Verdict::Transient(err) = judge(Step::Auth, &Reply::Bulk(b"hunter2".to_vec()), &opts) else { panic!() };
        assert!(!err.message().contains("hunter2"), "{err}");
        // Echoed inside an array (a proxy, a renamed command): scrubbed there too.
        let nested = Reply::Array(vec![Reply::Array(vec![Reply::Bulk(b"AUTH hunter2".to_vec())]), Reply::Integer(1)]);
        let Verdict::Transient(err) = judge(Step::Auth, &nested, &opts) else { panic!() };
        assert!(!err.message().contains("hunter2") && err.message().contains("AUTH ***"), "{err}");
    }
}
