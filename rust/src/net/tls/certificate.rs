//! What this client reads of a certificate itself, for the one kind OpenSSL takes and webpki
//! does not: X.509 version 1 (what `openssl x509 -req` makes without `-extfile`: no
//! extensions, the host in the subject's CN only, no subjectAltName).
//!
//! - A version 1 **client** certificate is sent as it is: the server's OpenSSL decides. Only
//!   the local check that `ssl_keyfile` goes with `ssl_certfile` needs the certificate's public
//!   key, which is read here from its DER when webpki will not parse it.
//! - A version 1 **server** certificate is refused, with the true reason and the openssl
//!   commands that reissue it with a subjectAltName: webpki verifies names only against
//!   subjectAltName, and a CN-only certificate is what browsers and WebPKI stopped accepting.
//!   With `ssl_cert_reqs="none"` nothing is verified, and it is accepted like any other.

use std::fmt;

/// The parts of a certificate read here.
#[derive(Debug, PartialEq, Eq)]
pub struct Summary<'a> {
    /// The X.509 version: 1, 2 or 3.
    pub version: u8,
    /// The SubjectPublicKeyInfo, DER-encoded (tag and length included).
    pub public_key: &'a [u8],
}

/// One DER element at the start of `der`: its tag, its contents, and the bytes after it.
fn element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = match first {
        0..=0x7f => (first as usize, rest),
        0x81..=0x84 => {
            let count = (first - 0x80) as usize;
            let (bytes, rest) = rest.split_at_checked(count)?;
            (bytes.iter().fold(0usize, |len, &b| (len << 8) | b as usize), rest)
        }
        _ => return None,
    };
    let (contents, after) = rest.split_at_checked(len)?;
    Some((tag, contents, after))
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
/// `[0] EXPLICIT Version`: absent in a version 1 certificate.
const VERSION_TAG: u8 = 0xa0;

/// The version and public key of the DER certificate `der` (RFC 5280 4.1), or `None` if it is
/// not one.
pub fn summary(der: &[u8]) -> Option<Summary<'_>> {
    let (SEQUENCE, certificate, _) = element(der)? else { return None };
    let (SEQUENCE, mut tbs, _) = element(certificate)? else { return None };
    let mut version = 1;
    if tbs.first() == Some(&VERSION_TAG) {
        let (_, explicit, rest) = element(tbs)?;
        let (INTEGER, number, _) = element(explicit)? else { return None };
        version = match number {
            [n @ 0..=2] => n + 1,
            _ => return None,
        };
        tbs = rest;
    }
    // serialNumber, signature, issuer, validity, subject
    for expected in [INTEGER, SEQUENCE, SEQUENCE, SEQUENCE, SEQUENCE] {
        let (tag, _, rest) = element(tbs)?;
        if tag != expected {
            return None;
        }
        tbs = rest;
    }
    let (SEQUENCE, _, after) = element(tbs)? else { return None };
    Some(Summary { version, public_key: &tbs[..tbs.len() - after.len()] })
}

/// A server certificate of X.509 version 1, which cannot be verified: why, and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionOneCertificate {
    /// The host the client checks the certificate against (what a subjectAltName must list).
    pub host: String,
}

impl VersionOneCertificate {
    /// The subjectAltName entry that names `host`.
    fn alt_name(&self) -> String {
        match self.host.parse::<std::net::IpAddr>() {
            Ok(ip) => format!("IP:{ip}"),
            Err(_) => format!("DNS:{}", self.host),
        }
    }
}

impl fmt::Display for VersionOneCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the server's certificate is X.509 version 1 (made without extensions, e.g. by `openssl x509 -req` \
             without -extfile): it names its host only in its subject's CN, and this client verifies host names \
             against a subjectAltName only (as WebPKI does), so it cannot verify it. Reissue it with a \
             subjectAltName, signed by the same CA (server.crt, server.key, ca.crt, ca.key being its files): \
             openssl x509 -x509toreq -in server.crt -signkey server.key -out server.csr && printf \
             'subjectAltName={}\\n' > san.ext && openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key \
             -CAcreateserial -days 365 -extfile san.ext -out server.crt",
            self.alt_name()
        )
    }
}

impl std::error::Error for VersionOneCertificate {}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes()).unwrap().to_vec()
    }

    #[test]
    fn the_version_and_public_key_come_from_the_der() {
        let v3 = der(include_str!("testdata/server.pem"));
        let v1 = der(include_str!("testdata/server-v1.pem"));
        let (v3, v1) = (summary(&v3).unwrap(), summary(&v1).unwrap());
        assert_eq!((v3.version, v1.version), (3, 1));
        // Both were issued for the same key, so their public keys are the same bytes.
        assert_eq!(v3.public_key, v1.public_key);
        assert_eq!(v1.public_key[0], SEQUENCE);
        let spki = rustls::pki_types::SubjectPublicKeyInfoDer::from(v1.public_key);
        assert_eq!(spki.as_ref().len(), v1.public_key.len());
    }

    #[test]
    fn what_is_not_a_certificate_has_no_summary() {
        let v3 = der(include_str!("testdata/server.pem"));
        assert_eq!(summary(&v3[..v3.len() / 2]), None, "cut short");
        assert_eq!(summary(b"\x30\x03\x02\x01\x01"), None);
        assert_eq!(summary(b""), None);
        assert_eq!(summary(&[0x30, 0x85, 0, 0, 0, 0, 1]), None, "a length of 5 bytes");
    }

    #[test]
    fn the_refusal_names_the_host_in_the_command_that_reissues_the_certificate() {
        let ip = VersionOneCertificate { host: "127.0.0.1".into() }.to_string();
        assert!(ip.contains("printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext"), "{ip}");
        assert!(ip.starts_with("the server's certificate is X.509 version 1"), "{ip}");
        let dns = VersionOneCertificate { host: "cache.example".into() }.to_string();
        assert!(dns.contains("subjectAltName=DNS:cache.example"), "{dns}");
    }
}
