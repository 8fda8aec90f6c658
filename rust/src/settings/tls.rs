//! The TLS fields, with redis-py's names: `rediss://` or `ssl=True` turns TLS on; `ssl_*` say
//! what the server must prove and what this client presents. They resolve like every other
//! field (explicit > URL query > environment > default) and are checked once, here: the files
//! are read when the settings are built ([`TlsConfig::new`]), so a missing CA bundle is an
//! error at construction, not at the first operation.
//!
//! Two rules keep anyone from believing they are encrypted when they are not: TLS is never
//! turned off over a source that turned it on (`ssl=False` with a `rediss://` URL is refused,
//! not a silent downgrade), and an `ssl_*` field given (as an argument or in the URL) while TLS
//! is off is an error naming it. The `LMCACHE_RESP_SSL_*` variables are set for a whole
//! deployment: where TLS is off they are ignored.

use super::Settings;
use super::resolver::Resolver;
use super::table::{Group, group};
use super::value::{Given, Value};
use crate::error::{Error, Result};
use crate::net::{Endpoint, TlsConfig, TlsOptions};
use std::path::PathBuf;
use std::sync::Arc;

/// What `ssl_cert_reqs="none"` puts in [`Settings::warnings`] (logged at WARNING).
pub const VERIFICATION_OFF_WARNING: &str = "TLS certificate verification is off (ssl_cert_reqs='none'): anyone on \
     the path can read and change the data; for test rigs only";

impl Resolver<'_> {
    /// An `ssl_*` field from the caller, then the URL's query; empty text is "not set".
    fn tls_field(&self, name: &'static str) -> Option<Given<'_>> {
        let set = |value: &&Value| !matches!(value, Value::Text(text) if text.trim().is_empty());
        self.explicit(name)
            .filter(set)
            .or_else(|| self.query_value(name).filter(set))
            .map(|value| Given { name, value })
    }

    /// Whether TLS is on: `ssl` (explicit, then the query), else the URL's scheme. A source
    /// that turns it off over one that turned it on is refused.
    fn tls_on(&self) -> Result<bool> {
        let flag = |value: &Value| Given { name: "ssl", value }.flag();
        let explicit = self.explicit("ssl").map(flag).transpose()?;
        let query = self.query_value("ssl").map(flag).transpose()?;
        let scheme = self.url.tls;
        if explicit == Some(false) && (scheme || query == Some(true)) {
            let asks = if scheme { "its rediss:// scheme" } else { "ssl=true in its query" };
            return Err(Error::invalid(format!(
                "ssl=False contradicts the URL, which asks for TLS ({asks}): TLS is never turned off silently; \
                 give a redis:// URL for a plaintext server"
            )));
        }
        if explicit.is_none() && query == Some(false) && scheme {
            return Err(Error::invalid(
                "ssl=false in the URL's query contradicts its rediss:// scheme: TLS is never turned off silently; \
                 give a redis:// URL for a plaintext server",
            ));
        }
        Ok(explicit.or(query).unwrap_or(scheme))
    }

    /// A path field: explicit, the query, then its environment variable (named, for errors).
    fn tls_path(&self, name: &'static str) -> Result<(Option<PathBuf>, Option<&'static str>)> {
        if let Some(given) = self.tls_field(name) {
            return Ok((Some(given.path()?), None));
        }
        match self.env_values.iter().find(|(field, _, _)| *field == name) {
            Some((_, var, value)) => Ok((Some(Given { name: var, value }.path()?), Some(*var))),
            None => Ok((None, None)),
        }
    }

    /// `settings.tls`: None for plaintext, else the checked configuration.
    pub(super) fn tls(&self, settings: &mut Settings) -> Result<()> {
        if !self.tls_on()? {
            let given: Vec<&str> =
                group(Group::Tls).filter(|name| *name != "ssl" && self.tls_field(name).is_some()).collect();
            if !given.is_empty() {
                let (names, verb) = match given.as_slice() {
                    [one] => (one.to_string(), "is"),
                    many => (many.join(", "), "are"),
                };
                return Err(Error::invalid(format!(
                    "{names} {verb} set but TLS is off: use a rediss:// URL or ssl=True (nothing would be encrypted)"
                )));
            }
            return Ok(());
        }
        if let Some(Endpoint::Unix { path }) = settings.endpoints.first() {
            return Err(Error::invalid(format!(
                "TLS is on but the server is the Unix socket {}: redis-server speaks TLS on TCP only (tls-port); \
                 connect to its TLS port, or leave TLS off for the socket",
                path.display()
            )));
        }
        let mut options = TlsOptions::new();
        let mut from_env = Vec::new();
        for (name, slot) in [
            ("ssl_ca_certs", &mut options.ca_certs),
            ("ssl_ca_path", &mut options.ca_path),
            ("ssl_certfile", &mut options.certfile),
            ("ssl_keyfile", &mut options.keyfile),
        ] {
            let (path, var) = self.tls_path(name)?;
            *slot = path;
            from_env.extend(var.map(|var| (name, var)));
        }
        if let Some(given) = self.tls_field("ssl_cert_reqs") {
            options.verify_certificate = cert_reqs(&given)?;
        }
        let check_hostname = self.tls_field("ssl_check_hostname").map(|given| given.flag()).transpose()?;
        if check_hostname == Some(true) && !options.verify_certificate {
            return Err(Error::invalid(
                "ssl_check_hostname=True needs the certificate verified, which ssl_cert_reqs='none' turns off: \
                 drop one of them",
            ));
        }
        options.check_hostname = options.verify_certificate && check_hostname.unwrap_or(true);
        if let Some(given) = self.tls_field("ssl_server_name") {
            options.server_name = Some(server_name(&given)?);
        }
        let config = TlsConfig::new(options).map_err(|err| blame_env(err, &from_env))?;
        if config.verification_off() {
            settings.warnings.push(VERIFICATION_OFF_WARNING.into());
        }
        settings.tls = Some(Arc::new(config));
        Ok(())
    }
}

/// `ssl_cert_reqs`: redis-py's `"required"`, `"optional"` and `"none"` (any case, `CERT_`
/// prefix allowed), or `ssl.CERT_*` (2, 1, 0). For a client, "optional" is "required": a
/// server always presents a certificate, so there is nothing optional to skip.
fn cert_reqs(given: &Given<'_>) -> Result<bool> {
    let verify = match given.value {
        Value::Int(2 | 1) => Some(true),
        Value::Int(0) => Some(false),
        Value::Text(text) => {
            let text = text.trim().to_ascii_lowercase();
            match text.strip_prefix("cert_").unwrap_or(&text) {
                "required" | "optional" => Some(true),
                "none" => Some(false),
                _ => None,
            }
        }
        _ => None,
    };
    verify.ok_or_else(|| {
        Error::invalid(format!(
            "ssl_cert_reqs must be 'required' (the default), 'optional' (the same, for a client) or 'none' \
             (no verification: test rigs only), got {}",
            given.value
        ))
    })
}

/// `ssl_server_name`: a DNS name or an IP address, as SNI and verification need.
fn server_name(given: &Given<'_>) -> Result<String> {
    let text = given.text()?.trim();
    let bare = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')).unwrap_or(text);
    rustls::pki_types::ServerName::try_from(bare.to_owned()).map_err(|_| {
        Error::invalid(format!("ssl_server_name must be a DNS name or an IP address, got {}", given.value))
    })?;
    Ok(text.to_owned())
}

/// An error about a file that came from an environment variable says which one.
fn blame_env(err: Error, from_env: &[(&str, &str)]) -> Error {
    match from_env.iter().find(|(name, _)| err.message().starts_with(&format!("{name} "))) {
        Some((_, var)) => Error::new(err.kind(), format!("{} (from {var})", err.message())),
        None => err,
    }
}
