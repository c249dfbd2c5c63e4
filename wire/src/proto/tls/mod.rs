//! The agent link's security: TLS 1.3 with a certificate on both ends.
//!
//! Every node and gangd hold a certificate issued by the cluster's own CA
//! (`gangd ca init`, `gangd ca issue NODE`, see ca.rs); each side verifies
//! the other's against the CA before a single protocol frame is read:
//!
//! - gangd's certificate names `gangd` and has only the serverAuth
//!   extended key usage; agents verify it for that name, whatever address
//!   they dialled. A node's certificate cannot pass for gangd's (no
//!   serverAuth), so a compromised node cannot impersonate the coordinator
//!   to the others, and a user who binds gangd's port while it restarts
//!   has no certificate at all.
//! - A node's certificate names the node (one DNS-style name, its SAN)
//!   and has only clientAuth. gangd takes the node's name from the
//!   certificate it verified, never from a field the node sends.
//! - gangd refuses certificates listed in the CA's revocation list
//!   (`crl.pem`, `gangd ca revoke`), re-read when the file changes: that is
//!   how a node's certificate is rotated or a stolen one disabled.
//!
//! After the handshake every frame is encrypted and authenticated by TLS
//! (sequence numbers included), so frames cannot be read, forged,
//! replayed or reordered by anyone on the path. Only TLS 1.3 is offered;
//! no session resumption (a connection is long-lived, and every handshake
//! checks the certificates again, revocation included).
//!
//! Files (PEM): gangd reads `ca.crt`, `gangd.crt`, `gangd.key` and
//! `crl.pem` from its CA directory (`ca.key` is only needed to issue, and
//! can live elsewhere); a node reads `ca.crt`, `node.crt`, `node.key` from
//! its TLS directory. Private keys must be readable by their owner only.

pub mod ca;
pub mod session;
pub mod testing;

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use anyhow::{anyhow, bail, Context, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

pub use session::{handshake, Session, SessionReader, SessionWriter};
// The TLS library, for the crates that hold a connection of ours.
pub use rustls;

/// The name in gangd's certificate, checked by every agent.
pub const GANGD_NAME: &str = "gangd";
/// A PEM file larger than this is surely not a certificate or key.
const MAX_PEM_FILE: u64 = 1 << 20;

/// The crypto every config uses: ring, TLS 1.3 only.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read_pem(path: &Path, private: bool) -> Result<Vec<u8>> {
    let show = path.display();
    let file = File::open(path).with_context(|| format!("opening {show}"))?;
    let meta = file.metadata().with_context(|| format!("reading {show}"))?;
    if !meta.is_file() {
        bail!("{show} is not a regular file");
    }
    let mode = meta.permissions().mode() & 0o777;
    if private && mode & 0o077 != 0 {
        bail!("private key {show} has mode {mode:03o}: it must be readable by its owner only (chmod 600 {show})");
    }
    let mut content = Vec::new();
    file.take(MAX_PEM_FILE + 1)
        .read_to_end(&mut content)
        .with_context(|| format!("reading {show}"))?;
    if content.len() as u64 > MAX_PEM_FILE {
        bail!("{show} is larger than {MAX_PEM_FILE} bytes: not a PEM file");
    }
    Ok(content)
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let pem = read_pem(path, false)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("{}: not a PEM certificate: {e}", path.display()))?;
    if certs.is_empty() {
        bail!("{}: no certificate in it", path.display());
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let pem = read_pem(path, true)?;
    PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| anyhow!("{}: not a PEM private key: {e}", path.display()))
}

fn load_crls(path: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>> {
    let pem = read_pem(path, false)?;
    CertificateRevocationListDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("{}: not a PEM revocation list: {e}", path.display()))
}

fn roots(ca: &[CertificateDer<'static>]) -> Result<Arc<RootCertStore>> {
    let mut roots = RootCertStore::empty();
    for cert in ca {
        roots
            .add(cert.clone())
            .map_err(|e| anyhow!("the cluster CA certificate is not usable: {e}"))?;
    }
    Ok(Arc::new(roots))
}

/// gangd's side: its CA directory, with the revocation list re-read when
/// it changes (checked at every new connection: a stat).
pub struct ServerTls {
    dir: PathBuf,
    ca: Vec<CertificateDer<'static>>,
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    current: Mutex<(Option<SystemTime>, Arc<ServerConfig>)>,
}

impl ServerTls {
    /// Loads `ca.crt`, `gangd.crt`, `gangd.key` and `crl.pem` from `dir`.
    pub fn load(dir: &Path) -> Result<ServerTls> {
        let ca = load_certs(&dir.join("ca.crt"))?;
        let certs = load_certs(&dir.join("gangd.crt"))?;
        let key = load_key(&dir.join("gangd.key"))?;
        let name = cert_name(&certs[0])?;
        if name != GANGD_NAME {
            bail!(
                "{}: names {name:?}, not {GANGD_NAME:?}: not gangd's certificate",
                dir.join("gangd.crt").display()
            );
        }
        let crl = dir.join("crl.pem");
        let stamp = crl_stamp(&crl);
        let config = server_config(&ca, &certs, &key, &crl)?;
        Ok(ServerTls {
            dir: dir.to_path_buf(),
            ca,
            certs,
            key,
            current: Mutex::new((stamp, config)),
        })
    }

    /// The config for a new connection: rebuilt when `crl.pem` changed; a
    /// revocation list that no longer loads keeps the last good config
    /// (and says so), never an open door.
    pub fn config(&self) -> Arc<ServerConfig> {
        let crl = self.dir.join("crl.pem");
        let stamp = crl_stamp(&crl);
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if stamp != current.0 {
            match server_config(&self.ca, &self.certs, &self.key, &crl) {
                Ok(config) => {
                    log::info!("revocation list {} reloaded", crl.display());
                    *current = (stamp, config);
                }
                Err(e) => {
                    log::warn!("revocation list {} changed but does not load ({e:#}): keeping the previous one", crl.display());
                    current.0 = stamp;
                }
            }
        }
        current.1.clone()
    }
}

fn crl_stamp(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn server_config(
    ca: &[CertificateDer<'static>],
    certs: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
    crl: &Path,
) -> Result<Arc<ServerConfig>> {
    let crls = if crl.exists() {
        load_crls(crl)?
    } else {
        Vec::new()
    };
    let verifier = WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider())
        .with_crls(crls)
        .build()
        .map_err(|e| anyhow!("client certificate verifier: {e}"))?;
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| anyhow!("TLS 1.3: {e}"))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs.to_vec(), key.clone_key())
        .map_err(|e| anyhow!("gangd's certificate and key do not go together: {e}"))?;
    config.send_tls13_tickets = 0;
    Ok(Arc::new(config))
}

/// A node's side: its certificate, key and the CA, from its TLS directory.
pub struct ClientTls {
    /// The node's name, from its certificate.
    pub node: String,
    pub config: Arc<ClientConfig>,
}

impl ClientTls {
    /// Loads `ca.crt`, `node.crt` and `node.key` from `dir`.
    pub fn load(dir: &Path) -> Result<ClientTls> {
        let ca = load_certs(&dir.join("ca.crt"))?;
        let certs = load_certs(&dir.join("node.crt"))?;
        let key = load_key(&dir.join("node.key"))?;
        let node =
            cert_name(&certs[0]).with_context(|| format!("{}", dir.join("node.crt").display()))?;
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| anyhow!("TLS 1.3: {e}"))?
            .with_root_certificates(roots(&ca)?)
            .with_client_auth_cert(certs, key)
            .map_err(|e| anyhow!("the node's certificate and key do not go together: {e}"))?;
        config.resumption = rustls::client::Resumption::disabled();
        Ok(ClientTls {
            node,
            config: Arc::new(config),
        })
    }

    /// A client connection that accepts only gangd's certificate.
    pub fn connection(&self) -> Result<rustls::ClientConnection> {
        let name = ServerName::try_from(GANGD_NAME).expect("a valid DNS name");
        rustls::ClientConnection::new(self.config.clone(), name)
            .map_err(|e| anyhow!("TLS client: {e}"))
    }
}

/// A name gangd can give a node: a DNS name (labels of letters, digits
/// and '-', separated by dots, at most 253 characters), never "gangd".
pub fn check_node_name(name: &str) -> Result<()> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        bail!("{name:?} is not a valid node name (letters, digits and '-', dot-separated labels of 1-63 characters)");
    }
    if name.eq_ignore_ascii_case(GANGD_NAME) {
        bail!("{GANGD_NAME:?} is gangd's own name, not a node's");
    }
    Ok(())
}

/// The one name a certificate of ours carries: its single DNS
/// subjectAltName.
pub fn cert_name(cert: &CertificateDer<'_>) -> Result<String> {
    use x509_parser::extensions::GeneralName;
    let (_, x509) = x509_parser::parse_x509_certificate(cert)
        .map_err(|e| anyhow!("not an X.509 certificate: {e}"))?;
    let san = x509
        .subject_alternative_name()
        .map_err(|e| anyhow!("bad subjectAltName: {e}"))?
        .ok_or_else(|| anyhow!("the certificate has no subjectAltName"))?;
    let names: Vec<&str> = san
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DNSName(d) => Some(*d),
            _ => None,
        })
        .collect();
    match names.as_slice() {
        [one] => Ok(one.to_string()),
        [] => bail!("the certificate names no DNS name"),
        many => bail!(
            "the certificate names {} DNS names ({many:?}): a cluster certificate names one",
            many.len()
        ),
    }
}

/// The verified name of the node at the other end of a server connection.
pub fn peer_node(conn: &rustls::Connection) -> Result<String> {
    let cert = conn
        .peer_certificates()
        .and_then(|c| c.first())
        .ok_or_else(|| anyhow!("the node presented no certificate"))?;
    let name = cert_name(cert)?;
    check_node_name(&name)?;
    Ok(name)
}
