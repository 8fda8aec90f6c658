//! What a TLS connection trusts and presents, checked once: files are read and parsed when the
//! settings are resolved, so a missing CA bundle or a bad key is an error at construction, not
//! at the first operation.
//!
//! The names follow redis-py's (`ssl_ca_certs`, `ssl_certfile`, ...), so users carry their
//! settings over. Key material never appears in `Debug`, logs or errors: only file paths do.

use crate::error::{Error, Result};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// TLS settings as given (redis-py's names); [`TlsConfig::new`] checks and loads them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// `ssl_ca_certs`: a PEM bundle of the CAs to trust. With neither this nor `ca_path`, the
    /// system trust store.
    pub ca_certs: Option<PathBuf>,
    /// `ssl_ca_path`: a directory of PEM CA certificates to trust.
    pub ca_path: Option<PathBuf>,
    /// `ssl_certfile`: this client's certificate chain (PEM), for servers that require one
    /// (`tls-auth-clients yes`).
    pub certfile: Option<PathBuf>,
    /// `ssl_keyfile`: the private key of `certfile` (PEM, unencrypted).
    pub keyfile: Option<PathBuf>,
    /// `ssl_check_hostname`: the server's certificate must name the host connected to (or
    /// `server_name`). On by default.
    pub check_hostname: bool,
    /// `ssl_cert_reqs`: `false` is `"none"`: the server's certificate is not verified at all.
    /// For test rigs only; warned about.
    pub verify_certificate: bool,
    /// `ssl_server_name`: the name sent as SNI and checked against the certificate instead of
    /// the host connected to (a server reached by IP address or through a tunnel).
    pub server_name: Option<String>,
}

impl TlsOptions {
    /// Verification on, hostname checked, the system trust store, no client certificate.
    pub fn new() -> TlsOptions {
        TlsOptions { check_hostname: true, verify_certificate: true, ..TlsOptions::default() }
    }
}

/// Checked TLS settings with the loaded trust anchors and client identity, shared by every
/// connection of a client, store or bridge.
#[derive(Clone)]
pub struct TlsConfig {
    options: TlsOptions,
    client: Arc<ClientConfig>,
}

impl fmt::Debug for TlsConfig {
    /// Paths and switches only: never key material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsConfig").field("options", &self.options).finish_non_exhaustive()
    }
}

impl PartialEq for TlsConfig {
    fn eq(&self, other: &Self) -> bool {
        self.options == other.options
    }
}

/// The provider every connection uses: rustls with ring (see the workspace's Cargo.toml).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl TlsConfig {
    /// Loads the CA certificates, the client certificate and key, and builds the rustls
    /// client configuration. Errors name the setting and the file, never the key's contents.
    pub fn new(options: TlsOptions) -> Result<TlsConfig> {
        if options.keyfile.is_some() != options.certfile.is_some() {
            let (given, missing) = if options.certfile.is_some() {
                ("ssl_certfile", "ssl_keyfile")
            } else {
                ("ssl_keyfile", "ssl_certfile")
            };
            return Err(Error::invalid(format!("{given} is set but {missing} is not: mutual TLS needs both")));
        }
        let provider = provider();
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|err| Error::invalid(format!("TLS configuration: {err}")))?;
        let chain = match options.verify_certificate {
            true => Some(
                WebPkiServerVerifier::builder_with_provider(Arc::new(trust_anchors(&options)?), provider.clone())
                    .build()
                    .map_err(|err| Error::invalid(format!("TLS trust anchors: {err}")))?,
            ),
            false => None,
        };
        let builder = match (chain, options.check_hostname) {
            (Some(chain), true) => builder.with_webpki_verifier(chain),
            (chain, _) => builder.dangerous().with_custom_certificate_verifier(Arc::new(Relaxed { chain, provider })),
        };
        let mut client = match (&options.certfile, &options.keyfile) {
            (Some(certfile), Some(keyfile)) => {
                let chain = certificates(certfile, "ssl_certfile")?;
                let key = private_key(keyfile)?;
                builder.with_client_auth_cert(chain, key).map_err(|err| {
                    Error::invalid(format!(
                        "ssl_keyfile {} does not go with ssl_certfile {}: {err}",
                        keyfile.display(),
                        certfile.display()
                    ))
                })?
            }
            _ => builder.with_no_client_auth(),
        };
        // The handshake is rustls's; the records that carry data are this crate's (see
        // `super::record`), so the traffic keys must be handed over once it completes.
        client.enable_secret_extraction = true;
        // No session resumption: a connection lives long and reconnects are rare.
        client.resumption = rustls::client::Resumption::disabled();
        Ok(TlsConfig { options, client: Arc::new(client) })
    }

    /// The settings as given.
    pub fn options(&self) -> &TlsOptions {
        &self.options
    }

    /// The rustls configuration connections are made with.
    pub fn client_config(&self) -> Arc<ClientConfig> {
        self.client.clone()
    }

    /// The name to send as SNI and to verify the certificate against, for a server reached as
    /// `host`: `ssl_server_name` if set, else the host (an IP address is verified against the
    /// certificate's IP entries and sends no SNI).
    pub fn server_name(&self, host: &str) -> Result<ServerName<'static>> {
        let name = self.options.server_name.as_deref().unwrap_or(host);
        let name = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(name);
        ServerName::try_from(name.to_owned())
            .map_err(|_| Error::invalid(format!("{name:?} is not a valid TLS server name (set ssl_server_name)")))
    }

    /// Whether verification is off (`ssl_cert_reqs="none"`): the caller warns.
    pub fn verification_off(&self) -> bool {
        !self.options.verify_certificate
    }
}

/// The CAs from `ssl_ca_certs` and `ssl_ca_path`, or else the system's.
fn trust_anchors(options: &TlsOptions) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    if options.ca_certs.is_none() && options.ca_path.is_none() {
        let found = rustls_native_certs::load_native_certs();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            let why = found.errors.first().map(|e| format!(": {e}")).unwrap_or_default();
            return Err(Error::invalid(format!(
                "no CA certificates found in the system trust store{why}: set ssl_ca_certs to a CA bundle"
            )));
        }
        return Ok(roots);
    }
    if let Some(file) = &options.ca_certs {
        for cert in certificates(file, "ssl_ca_certs")? {
            roots.add(cert).map_err(|err| {
                Error::invalid(format!("ssl_ca_certs {}: a certificate is not a usable CA: {err}", file.display()))
            })?;
        }
    }
    if let Some(dir) = &options.ca_path {
        if !dir.is_dir() {
            return Err(Error::invalid(format!("ssl_ca_path {} is not a directory", dir.display())));
        }
        let found = rustls_native_certs::load_certs_from_paths(None, Some(dir));
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 && options.ca_certs.is_none() {
            return Err(Error::invalid(format!("ssl_ca_path {} holds no PEM CA certificates", dir.display())));
        }
    }
    Ok(roots)
}

/// Every certificate of a PEM file; at least one.
fn certificates(file: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>> {
    let unreadable = |err: &dyn fmt::Display| Error::invalid(format!("{setting} {}: {err}", file.display()));
    std::fs::metadata(file).map_err(|err| unreadable(&err))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
        .map_err(|err| unreadable(&err))?
        .collect::<std::result::Result<_, _>>()
        .map_err(|err| unreadable(&err))?;
    if certs.is_empty() {
        return Err(unreadable(&"no PEM certificate (-----BEGIN CERTIFICATE-----) in the file"));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1). An encrypted key is refused with
/// what to do about it: its contents never reach the error.
fn private_key(file: &Path) -> Result<PrivateKeyDer<'static>> {
    let unreadable = |err: &dyn fmt::Display| Error::invalid(format!("ssl_keyfile {}: {err}", file.display()));
    let text = std::fs::read(file).map_err(|err| unreadable(&err))?;
    if memchr::memmem::find(&text, b"ENCRYPTED").is_some() {
        return Err(unreadable(
            &"the key is encrypted with a passphrase, which this client does not take: store it decrypted, \
              readable only by the service's user (openssl pkey -in KEY -out KEY.plain)",
        ));
    }
    PrivateKeyDer::from_pem_slice(&text).map_err(|_| unreadable(&"no PEM private key in the file"))
}

/// Verification relaxed on purpose. `ssl_check_hostname=False` (`chain` set): the chain must
/// still lead to a trusted CA, but the certificate may name any host. `ssl_cert_reqs="none"`
/// (`chain` None): any certificate is accepted. Either way the handshake's signatures are
/// checked, so the peer holds the key of the certificate it sent, whoever it is.
#[derive(Debug)]
struct Relaxed {
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Relaxed {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        use rustls::CertificateError::{NotValidForName, NotValidForNameContext};
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(NotValidForName | NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_without_its_key_is_refused() {
        let mut options = TlsOptions::new();
        options.certfile = Some("/nonexistent/client.pem".into());
        let err = TlsConfig::new(options).unwrap_err();
        assert_eq!(err.message(), "ssl_certfile is set but ssl_keyfile is not: mutual TLS needs both");
    }

    #[test]
    fn a_missing_ca_bundle_names_the_setting_and_the_file() {
        let mut options = TlsOptions::new();
        options.ca_certs = Some("/nonexistent/ca.pem".into());
        let err = TlsConfig::new(options).unwrap_err();
        assert!(err.message().starts_with("ssl_ca_certs /nonexistent/ca.pem: "), "{err}");
    }

    #[test]
    fn a_file_without_certificates_is_refused() {
        let dir = std::env::temp_dir().join(format!("lmcache-resp-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("empty.pem");
        std::fs::write(&file, b"not a certificate\n").unwrap();
        let mut options = TlsOptions::new();
        options.ca_certs = Some(file.clone());
        let err = TlsConfig::new(options).unwrap_err();
        assert!(err.message().contains("no PEM certificate"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_encrypted_key_is_refused_without_showing_it() {
        let dir = std::env::temp_dir().join(format!("lmcache-resp-tls-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = dir.join("key.pem");
        std::fs::write(&key, b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nc2VjcmV0\n-----END ENCRYPTED PRIVATE KEY-----\n")
            .unwrap();
        let err = private_key(&key).unwrap_err();
        assert!(err.message().contains("encrypted with a passphrase"), "{err}");
        assert!(!err.message().contains("c2VjcmV0"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_server_name_is_the_host_unless_overridden() {
        let mut options = TlsOptions::new();
        options.verify_certificate = false;
        let config = TlsConfig::new(options.clone()).unwrap();
        assert_eq!(config.server_name("cache.example").unwrap(), ServerName::try_from("cache.example").unwrap());
        assert!(matches!(config.server_name("127.0.0.1").unwrap(), ServerName::IpAddress(_)));
        assert!(matches!(config.server_name("[::1]").unwrap(), ServerName::IpAddress(_)));
        options.server_name = Some("redis.internal".into());
        let config = TlsConfig::new(options).unwrap();
        assert_eq!(config.server_name("10.0.0.5").unwrap(), ServerName::try_from("redis.internal").unwrap());
        assert!(format!("{config:?}").contains("redis.internal"));
    }
}
