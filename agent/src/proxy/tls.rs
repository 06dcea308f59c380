//! TLS for the hosts the proxy inspects (issue 60): a CA made for each run
//! (its key only in this process's memory), a certificate per host made on
//! the fly and kept for the run, the server side offered to the run's
//! clients (ALPN `http/1.1`, or `h2` alone when the upstream agreed to it),
//! and the client side that verifies each upstream against the system's
//! roots or the CAs `[network] tls_ca` names.
//! rustls does the TLS; rcgen makes the certificates.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, Issuer, KeyPair, KeyUsagePurpose, NameConstraints,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// HTTP/1.1's ALPN name.
const ALPN_HTTP1: &[u8] = b"http/1.1";
/// HTTP/2's ALPN name.
pub const ALPN_H2: &[u8] = b"h2";

/// The protocol an inspected connection speaks to the client: the one the
/// upstream agreed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http1,
    H2,
}

/// Why TLS for the run could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot make the run's certificate authority: {0}")]
    Ca(rcgen::Error),
    #[error("cannot make a certificate for {host}: {source}")]
    Leaf { host: String, source: rcgen::Error },
    #[error("cannot read the CA file {path} ([network] tls_ca): {reason}")]
    CaFile { path: PathBuf, reason: String },
    #[error(
        "no trusted root certificate for the upstreams: {0} (name a PEM file with [network] tls_ca)"
    )]
    NoRoots(String),
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The run's TLS state: its CA, the certificates made with it, and how
/// upstreams are verified.
pub struct RunTls {
    issuer: Issuer<'static, KeyPair>,
    ca: CertificateDer<'static>,
    /// The system's roots, PEM: the rest of the bundle the run trusts.
    system_pem: String,
    leaves: Mutex<HashMap<String, Leaf>>,
    upstream: Arc<ClientConfig>,
    upstream_h2: Arc<ClientConfig>,
}

/// The server sides of one host: HTTP/1.1 and HTTP/2.
#[derive(Clone)]
struct Leaf {
    http1: Arc<ServerConfig>,
    h2: Arc<ServerConfig>,
}

impl Leaf {
    fn of(&self, protocol: Protocol) -> Arc<ServerConfig> {
        Arc::clone(match protocol {
            Protocol::Http1 => &self.http1,
            Protocol::H2 => &self.h2,
        })
    }
}

impl std::fmt::Debug for RunTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunTls").finish_non_exhaustive()
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// PEM of one certificate.
fn pem(der: &[u8]) -> String {
    let b64 = super::server::base64(der);
    let mut s = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        s.push_str(&String::from_utf8_lossy(line));
        s.push('\n');
    }
    s.push_str("-----END CERTIFICATE-----\n");
    s
}

/// The certificates of a PEM file.
fn read_pem_file(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |reason: String| TlsError::CaFile {
        path: path.to_path_buf(),
        reason,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad(e.to_string()))?
        .collect::<Result<_, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no certificate in it".into()));
    }
    Ok(certs)
}

impl RunTls {
    /// A CA named "lockrun run `run`" that can vouch only for `names` and
    /// their subdomains (name constraints: no other name, no IP address),
    /// and the upstream verifier: the certificates of `tls_ca` when given,
    /// else the system's roots.
    pub fn new(run: &str, tls_ca: Option<&Path>, names: &[String]) -> Result<Self, TlsError> {
        let key = KeyPair::generate().map_err(TlsError::Ca)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(TlsError::Ca)?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("lockrun run {run}"));
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.name_constraints = Some(NameConstraints {
            permitted_subtrees: names.iter().cloned().map(GeneralSubtree::DnsName).collect(),
            excluded_subtrees: vec![
                GeneralSubtree::IpAddress(CidrSubnet::V4([0; 4], [0; 4])),
                GeneralSubtree::IpAddress(CidrSubnet::V6([0; 16], [0; 16])),
            ],
        });
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = params
            .self_signed(&key)
            .map_err(TlsError::Ca)?
            .der()
            .clone();
        let issuer = Issuer::new(params, key);

        let native = rustls_native_certs::load_native_certs();
        let system: Vec<CertificateDer<'static>> = native.certs;
        let system_pem: String = system.iter().map(|c| pem(c)).collect();
        let mut roots = RootCertStore::empty();
        let trusted = match tls_ca {
            Some(p) => read_pem_file(p)?,
            None => system,
        };
        let (added, _ignored) = roots.add_parsable_certificates(trusted);
        if added == 0 {
            let why = native
                .errors
                .first()
                .map_or_else(|| "none found".to_owned(), ToString::to_string);
            return Err(TlsError::NoRoots(why));
        }
        let mut upstream = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut upstream_h2 = upstream.clone();
        upstream.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        upstream_h2.alpn_protocols = vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()];
        Ok(Self {
            issuer,
            ca,
            system_pem,
            leaves: Mutex::new(HashMap::new()),
            upstream: Arc::new(upstream),
            upstream_h2: Arc::new(upstream_h2),
        })
    }

    /// The run's CA certificate, PEM (what `NODE_EXTRA_CA_CERTS` needs).
    #[must_use]
    pub fn ca_pem(&self) -> String {
        pem(&self.ca)
    }

    /// The bundle the run trusts: the system's roots and the run's CA.
    #[must_use]
    pub fn bundle_pem(&self) -> String {
        let mut s = self.system_pem.clone();
        s.push_str(&self.ca_pem());
        s
    }

    /// How upstreams are verified, offering HTTP/1.1, or HTTP/2 first
    /// when `h2` (the client offered it).
    #[must_use]
    pub fn client_config(&self, h2: bool) -> Arc<ClientConfig> {
        Arc::clone(if h2 {
            &self.upstream_h2
        } else {
            &self.upstream
        })
    }

    /// A certificate for `host` signed by the run's CA, and its key. Made
    /// to pass strict verifiers (Python 3.13's `VERIFY_X509_STRICT`): an
    /// authority key identifier, key usage and server-auth EKU.
    fn leaf(
        &self,
        host: &str,
    ) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), TlsError> {
        let leaf_err = |source| TlsError::Leaf {
            host: host.to_owned(),
            source,
        };
        let key = KeyPair::generate().map_err(leaf_err)?;
        let mut params = CertificateParams::new(vec![host.to_owned()]).map_err(leaf_err)?;
        params.distinguished_name.push(DnType::CommonName, host);
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let leaf = params.signed_by(&key, &self.issuer).map_err(leaf_err)?;
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        Ok((leaf.der().clone(), private))
    }

    /// The server side for `host` (a name or an IP address, as the client
    /// asked for it) speaking `protocol`: a certificate for it, signed by
    /// the run's CA, made once per run.
    pub fn server_config(
        &self,
        host: &str,
        protocol: Protocol,
    ) -> Result<Arc<ServerConfig>, TlsError> {
        if let Some(l) = self
            .leaves
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(host)
        {
            return Ok(l.of(protocol));
        }
        let (leaf, private) = self.leaf(host)?;
        let mut http1 = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![leaf, self.ca.clone()], private)?;
        let mut h2 = http1.clone();
        http1.alpn_protocols = vec![ALPN_HTTP1.to_vec()];
        h2.alpn_protocols = vec![ALPN_H2.to_vec()];
        let leaf = Leaf {
            http1: Arc::new(http1),
            h2: Arc::new(h2),
        };
        let config = leaf.of(protocol);
        self.leaves
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(host.to_owned(), leaf);
        Ok(config)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A scratch dir, removed on every path (a failed assertion too).
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("lockrun-{tag}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The names the tests' CA may vouch for.
    fn names() -> Vec<String> {
        vec!["api.example.com".into(), "example.net".into()]
    }

    #[test]
    fn a_leaf_is_made_once_per_host_and_the_bundle_ends_with_the_runs_ca() {
        let scratch = Scratch::new("tls-unit");
        let dir = &scratch.0;
        let ca_file = dir.join("ca.pem");
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        std::fs::write(&ca_file, params.self_signed(&key).unwrap().pem()).unwrap();
        let tls = RunTls::new("unit", Some(&ca_file), &names()).unwrap();
        let a = tls
            .server_config("api.example.com", Protocol::Http1)
            .unwrap();
        let b = tls
            .server_config("api.example.com", Protocol::Http1)
            .unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.alpn_protocols, vec![b"http/1.1".to_vec()]);
        let h2 = tls.server_config("api.example.com", Protocol::H2).unwrap();
        assert_eq!(h2.alpn_protocols, vec![b"h2".to_vec()]);
        assert_eq!(
            tls.client_config(true).alpn_protocols,
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        assert_eq!(
            tls.client_config(false).alpn_protocols,
            vec![b"http/1.1".to_vec()]
        );
        assert!(tls.bundle_pem().ends_with(&tls.ca_pem()));
        assert!(tls.ca_pem().starts_with("-----BEGIN CERTIFICATE-----\n"));
        // A named CA file without a certificate is refused, saying which.
        std::fs::write(&ca_file, "not a certificate\n").unwrap();
        let err = RunTls::new("unit", Some(&ca_file), &names()).unwrap_err();
        assert!(err.to_string().contains("ca.pem"), "{err}");
    }

    #[test]
    fn the_runs_certificates_pass_a_strict_verifier() {
        let Ok(out) = std::process::Command::new("openssl")
            .arg("version")
            .output()
        else {
            println!("skipped: the_runs_certificates_pass_a_strict_verifier: no openssl here");
            return;
        };
        assert!(out.status.success());
        let scratch = Scratch::new("tls-strict");
        let dir = &scratch.0;
        let tls = RunTls::new("strict", None, &names()).unwrap_or_else(|_| {
            // No system roots here: any CA file will do for the upstreams.
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            std::fs::write(dir.join("any.pem"), p.self_signed(&key).unwrap().pem()).unwrap();
            RunTls::new("strict", Some(&dir.join("any.pem")), &names()).unwrap()
        });
        std::fs::write(dir.join("ca.pem"), tls.ca_pem()).unwrap();
        // Names it may vouch for pass; any other name, and any IP
        // address, fail on the CA's name constraints.
        for (host, vouched) in [
            ("api.example.com", true),
            ("deep.sub.example.net", true),
            ("example.org", false),
            ("notexample.net", false),
            ("192.0.2.7", false),
        ] {
            let (leaf, _) = tls.leaf(host).unwrap();
            std::fs::write(dir.join("leaf.pem"), pem(&leaf)).unwrap();
            let check = if host.starts_with('1') {
                "-verify_ip"
            } else {
                "-verify_hostname"
            };
            let out = std::process::Command::new("openssl")
                .args([
                    "verify",
                    "-x509_strict",
                    "-purpose",
                    "sslserver",
                    check,
                    host,
                    "-CAfile",
                ])
                .arg(dir.join("ca.pem"))
                .arg(dir.join("leaf.pem"))
                .output()
                .unwrap();
            let said = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            if vouched {
                assert!(
                    out.status.success() && said.contains(": OK"),
                    "{host}: {said}"
                );
            } else {
                assert!(
                    !out.status.success() && said.contains("subtree violation"),
                    "{host}: {said}"
                );
            }
        }
    }
}
