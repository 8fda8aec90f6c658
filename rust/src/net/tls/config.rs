//! What a TLS connection trusts and presents, checked once: files are read and parsed when the
//! settings are resolved, so a missing CA bundle or a bad key is an error at construction, not
//! at the first operation.
//!
//! The names follow redis-py's (`ssl_ca_certs`, `ssl_certfile`, ...), so users carry their
//! settings over. Key material never appears in `Debug`, logs or errors: only file paths do.

use super::certificate::{self, VersionOneCertificate};
use super::record::KeyLimit;
use crate::error::{Error, Result};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, InconsistentKeys, OtherError, RootCertStore, SignatureScheme,
};
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
    /// When a connection's send key is renewed (see [`KeyLimit`]).
    key_limit: KeyLimit,
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
        let verifier = Verifier { chain, check_hostname: options.check_hostname, provider: provider.clone() };
        let builder = builder.dangerous().with_custom_certificate_verifier(Arc::new(verifier));
        let mut client = match (&options.certfile, &options.keyfile) {
            (Some(certfile), Some(keyfile)) => {
                let identity = client_identity(certfile, keyfile, &provider)?;
                builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(identity)))
            }
            _ => builder.with_no_client_auth(),
        };
        // The handshake is rustls's; the records that carry data are this crate's (see
        // `super::record`), so the traffic keys must be handed over once it completes.
        client.enable_secret_extraction = true;
        // No session resumption: a connection lives long and reconnects are rare.
        client.resumption = rustls::client::Resumption::disabled();
        Ok(TlsConfig { options, client: Arc::new(client), key_limit: KeyLimit::default() })
    }

    /// The same configuration with the send keys renewed at `limit`: for tests that take a
    /// connection past it without moving hundreds of gigabytes.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn with_key_limit(mut self, limit: KeyLimit) -> TlsConfig {
        self.key_limit = limit;
        self
    }

    /// When a connection's send key is renewed.
    pub fn key_limit(&self) -> KeyLimit {
        self.key_limit
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

/// This client's certificate and key (`ssl_certfile`, `ssl_keyfile`), checked to go together.
/// A certificate webpki cannot parse (X.509 version 1, which OpenSSL servers take) is sent as it
/// is: the server decides on it; only the key check reads its public key here instead (see
/// [`certificate`]).
fn client_identity(certfile: &Path, keyfile: &Path, provider: &CryptoProvider) -> Result<CertifiedKey> {
    let chain = certificates(certfile, "ssl_certfile")?;
    let key = provider
        .key_provider
        .load_private_key(private_key(keyfile)?)
        .map_err(|err| Error::invalid(format!("ssl_keyfile {}: {err}", keyfile.display())))?;
    let mismatch = || {
        Error::invalid(format!(
            "ssl_keyfile {} does not go with ssl_certfile {}: the key is not the certificate's (their public keys \
             differ)",
            keyfile.display(),
            certfile.display()
        ))
    };
    let identity = CertifiedKey::new(chain, key);
    match identity.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => Ok(identity),
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => Err(mismatch()),
        Err(unparsed) => {
            let end_entity = identity.cert[0].as_ref();
            let summary = certificate::summary(end_entity).ok_or_else(|| {
                Error::invalid(format!(
                    "ssl_certfile {}: its first certificate is not an X.509 certificate this client can read: {unparsed}",
                    certfile.display()
                ))
            })?;
            match identity.key.public_key() {
                Some(public) if public.as_ref() != summary.public_key => Err(mismatch()),
                _ => Ok(identity),
            }
        }
    }
}

/// How the server's certificate is verified: against the trust anchors (`chain`), and its name
/// too unless `ssl_check_hostname=False`; not at all with `ssl_cert_reqs="none"` (`chain`
/// None). Either way the handshake's signatures are checked, so the peer holds the key of the
/// certificate it sent, whoever it is. An X.509 version 1 certificate is refused saying so
/// (see [`certificate`]) unless nothing is verified.
#[derive(Debug)]
struct Verifier {
    chain: Option<Arc<WebPkiServerVerifier>>,
    check_hostname: bool,
    provider: Arc<CryptoProvider>,
}

impl Verifier {
    /// The public key of a version 1 certificate, which webpki does not parse.
    fn version_one_key<'a>(cert: &'a CertificateDer<'_>) -> Option<SubjectPublicKeyInfoDer<'a>> {
        let summary = certificate::summary(cert.as_ref()).filter(|summary| summary.version == 1)?;
        Some(SubjectPublicKeyInfoDer::from(summary.public_key))
    }
}

impl ServerCertVerifier for Verifier {
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
        if Verifier::version_one_key(end_entity).is_some() {
            let v1 = VersionOneCertificate { host: server_name.to_str().into_owned() };
            return Err(rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(v1)))));
        }
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(NotValidForName | NotValidForNameContext { .. }))
                if !self.check_hostname =>
            {
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
        let algorithms = &self.provider.signature_verification_algorithms;
        match Verifier::version_one_key(cert) {
            // Only reached with nothing verified (ssl_cert_reqs="none"): the key is still
            // checked to have signed the handshake.
            Some(key) => rustls::crypto::verify_tls13_signature_with_raw_key(message, &key, dss, algorithms),
            None => verify_tls13_signature(message, cert, dss, algorithms),
        }
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
