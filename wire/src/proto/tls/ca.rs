//! The cluster's certificate authority: `gangd ca init|issue|revoke|list`.
//!
//! One directory (default /etc/gangd/ca, mode 0700) holds:
//!
//! ```text
//! ca.key    the CA's private key (0600): whoever reads it can make a gangd
//!           or a node; it is only needed to issue and revoke, and can be
//!           kept offline
//! ca.crt    the CA certificate, copied to every node
//! gangd.crt gangd's certificate (name "gangd", serverAuth only) and
//! gangd.key its key (0600)
//! crl.pem   the revocation list gangd enforces (re-read when it changes)
//! index.tsv one line per certificate issued: serial, name, not after
//!           (unix seconds), revoked at (unix seconds, or -)
//! ```
//!
//! `issue NODE --out DIR` writes what a node needs into a new directory:
//! `ca.crt`, `node.crt` (name NODE, clientAuth only) and `node.key` (0600).
//! Rotating a node's certificate: issue into a new directory, install it
//! on the node, restart the agent, then `gangd ca revoke SERIAL` the old
//! one (`gangd ca list` shows the serials). Keys are ECDSA P-256.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod, KeyPair, KeyUsagePurpose,
    RevokedCertParams, SanType, SerialNumber,
};
use time::{Duration, OffsetDateTime};

use super::{check_node_name, GANGD_NAME};

/// Validity of the CA and of gangd's certificate.
const CA_DAYS: i64 = 20 * 365;
/// Default validity of a node's certificate.
pub const NODE_DAYS: i64 = 5 * 365;
/// How long a revocation list is said to be good for (rustls does not
/// enforce it here; other verifiers might).
const CRL_DAYS: i64 = 365;

/// One line of index.tsv.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    pub serial: String,
    pub name: String,
    pub not_after: i64,
    pub revoked: Option<i64>,
}

fn write_new(path: &Path, content: &[u8], mode: u32) -> Result<()> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| {
            format!(
                "creating {} (an existing file is never replaced)",
                path.display()
            )
        })?;
    f.write_all(content)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", path.display()))
}

/// Replaces `path` atomically (a temporary file renamed over it).
fn replace(path: &Path, content: &[u8], mode: u32) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = fs::remove_file(&tmp);
    write_new(&tmp, content, mode)?;
    fs::rename(&tmp, path).with_context(|| format!("replacing {}", path.display()))
}

fn random_serial() -> Result<(SerialNumber, String)> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| anyhow!("no random bytes from the OS: {e}"))?;
    bytes[0] &= 0x7f; // a positive INTEGER
    bytes[0] |= 0x01; // and no leading zero byte for DER to strip
    let hex = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok((SerialNumber::from_slice(&bytes), hex))
}

fn serial_of_hex(hex: &str) -> Result<SerialNumber> {
    if hex.len() % 2 != 0 || hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("{hex:?} is not a serial number (hex digits, as `gangd ca list` shows)");
    }
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("checked hex"))
        .collect();
    Ok(SerialNumber::from_slice(&bytes))
}

fn leaf(
    name: &str,
    eku: ExtendedKeyUsagePurpose,
    days: i64,
    serial: SerialNumber,
) -> Result<CertificateParams> {
    let mut p = CertificateParams::new(vec![name.to_string()])
        .map_err(|e| anyhow!("certificate for {name:?}: {e}"))?;
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, name);
    p.subject_alt_names =
        vec![SanType::DnsName(name.try_into().map_err(|e| {
            anyhow!("{name:?} cannot be a DNS name: {e}")
        })?)];
    p.is_ca = IsCa::ExplicitNoCa;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![eku];
    p.use_authority_key_identifier_extension = true;
    p.serial_number = Some(serial);
    let now = OffsetDateTime::now_utc();
    // An hour back: nodes whose clocks are a little behind still accept it.
    p.not_before = now - Duration::hours(1);
    p.not_after = now + Duration::days(days);
    Ok(p)
}

fn load_issuer(dir: &Path) -> Result<Issuer<'static, KeyPair>> {
    let key_pem = fs::read_to_string(dir.join("ca.key")).with_context(|| {
        format!(
            "reading {} (issuing needs the CA's key)",
            dir.join("ca.key").display()
        )
    })?;
    let key = KeyPair::from_pem(&key_pem).map_err(|e| anyhow!("ca.key: {e}"))?;
    let cert_pem = fs::read_to_string(dir.join("ca.crt"))
        .with_context(|| format!("reading {}", dir.join("ca.crt").display()))?;
    Issuer::from_ca_cert_pem(&cert_pem, key).map_err(|e| anyhow!("ca.crt: {e}"))
}

/// Reads index.tsv (empty if absent).
pub fn list(dir: &Path) -> Result<Vec<Issued>> {
    let path = dir.join("index.tsv");
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, line)| {
            let f: Vec<&str> = line.split('\t').collect();
            let bad = || anyhow!("{}:{}: malformed line {line:?}", path.display(), i + 1);
            if f.len() != 4 {
                return Err(bad());
            }
            Ok(Issued {
                serial: f[0].to_string(),
                name: f[1].to_string(),
                not_after: f[2].parse().map_err(|_| bad())?,
                revoked: match f[3] {
                    "-" => None,
                    t => Some(t.parse().map_err(|_| bad())?),
                },
            })
        })
        .collect()
}

fn save_index(dir: &Path, index: &[Issued]) -> Result<()> {
    let text: String = index
        .iter()
        .map(|i| {
            let revoked = i.revoked.map_or("-".to_string(), |t| t.to_string());
            format!("{}\t{}\t{}\t{revoked}\n", i.serial, i.name, i.not_after)
        })
        .collect();
    replace(&dir.join("index.tsv"), text.as_bytes(), 0o600)
}

fn write_crl(dir: &Path, issuer: &Issuer<'_, KeyPair>, index: &[Issued]) -> Result<()> {
    let now = OffsetDateTime::now_utc();
    let revoked = index
        .iter()
        .filter_map(|i| {
            let at = i.revoked?;
            Some(
                serial_of_hex(&i.serial).map(|serial_number| RevokedCertParams {
                    serial_number,
                    revocation_time: OffsetDateTime::from_unix_timestamp(at).unwrap_or(now),
                    reason_code: None,
                    invalidity_date: None,
                }),
            )
        })
        .collect::<Result<Vec<_>>>()?;
    let number = index.iter().filter(|i| i.revoked.is_some()).count() as u64 + 1;
    let crl = CertificateRevocationListParams {
        this_update: now - Duration::hours(1),
        next_update: now + Duration::days(CRL_DAYS),
        crl_number: SerialNumber::from(number),
        issuing_distribution_point: None,
        revoked_certs: revoked,
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(issuer)
    .map_err(|e| anyhow!("signing the revocation list: {e}"))?;
    let pem = crl.pem().map_err(|e| anyhow!("revocation list: {e}"))?;
    replace(&dir.join("crl.pem"), pem.as_bytes(), 0o644)
}

/// Makes a new CA in `dir` (created 0700; refused if it holds a CA
/// already), with gangd's certificate and an empty revocation list.
pub fn init(dir: &Path) -> Result<()> {
    if dir.join("ca.key").exists() || dir.join("ca.crt").exists() {
        bail!(
            "{} already holds a CA: a new one would lock every node out",
            dir.display()
        );
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let key = KeyPair::generate().map_err(|e| anyhow!("CA key: {e}"))?;
    let mut p = CertificateParams::default();
    // A name of its own: verifiers find a certificate's issuer by name.
    let (serial, hex) = random_serial()?;
    p.distinguished_name.push(
        DnType::CommonName,
        format!("scx_gang cluster CA {}", &hex[..16]),
    );
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let now = OffsetDateTime::now_utc();
    p.not_before = now - Duration::hours(1);
    p.not_after = now + Duration::days(CA_DAYS);
    p.serial_number = Some(serial);
    let cert = p
        .self_signed(&key)
        .map_err(|e| anyhow!("CA certificate: {e}"))?;
    write_new(&dir.join("ca.key"), key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&dir.join("ca.crt"), cert.pem().as_bytes(), 0o644)?;
    let issuer = Issuer::new(p, key);

    let (serial, hex) = random_serial()?;
    let gp = leaf(
        GANGD_NAME,
        ExtendedKeyUsagePurpose::ServerAuth,
        CA_DAYS,
        serial,
    )?;
    let gkey = KeyPair::generate().map_err(|e| anyhow!("gangd key: {e}"))?;
    let gcert = gp
        .signed_by(&gkey, &issuer)
        .map_err(|e| anyhow!("gangd's certificate: {e}"))?;
    write_new(
        &dir.join("gangd.key"),
        gkey.serialize_pem().as_bytes(),
        0o600,
    )?;
    write_new(&dir.join("gangd.crt"), gcert.pem().as_bytes(), 0o644)?;
    let index = vec![Issued {
        serial: hex,
        name: GANGD_NAME.into(),
        not_after: (now + Duration::days(CA_DAYS)).unix_timestamp(),
        revoked: None,
    }];
    save_index(dir, &index)?;
    write_crl(dir, &issuer, &index)
}

/// Issues a certificate for node `name` into the new directory `out`
/// (`ca.crt`, `node.crt`, `node.key`). Returns its serial.
pub fn issue(dir: &Path, name: &str, out: &Path, days: i64) -> Result<String> {
    check_node_name(name)?;
    if !(1..=CA_DAYS).contains(&days) {
        bail!("--days {days}: between 1 and {CA_DAYS}");
    }
    let issuer = load_issuer(dir)?;
    let ca_pem = fs::read(dir.join("ca.crt"))?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(out)
        .with_context(|| format!("creating {}", out.display()))?;
    let (serial, hex) = random_serial()?;
    let p = leaf(name, ExtendedKeyUsagePurpose::ClientAuth, days, serial)?;
    let not_after = p.not_after.unix_timestamp();
    let key = KeyPair::generate().map_err(|e| anyhow!("node key: {e}"))?;
    let cert = p
        .signed_by(&key, &issuer)
        .map_err(|e| anyhow!("node certificate: {e}"))?;
    write_new(&out.join("node.key"), key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&out.join("node.crt"), cert.pem().as_bytes(), 0o644)?;
    write_new(&out.join("ca.crt"), &ca_pem, 0o644)?;
    let mut index = list(dir)?;
    index.push(Issued {
        serial: hex.clone(),
        name: name.into(),
        not_after,
        revoked: None,
    });
    save_index(dir, &index)?;
    Ok(hex)
}

/// Revokes the certificate with serial `serial` and rewrites crl.pem.
pub fn revoke(dir: &Path, serial: &str) -> Result<Issued> {
    let serial = serial.to_ascii_lowercase();
    serial_of_hex(&serial)?;
    let issuer = load_issuer(dir)?;
    let mut index = list(dir)?;
    let entry = index
        .iter_mut()
        .find(|i| i.serial == serial)
        .ok_or_else(|| anyhow!("no certificate with serial {serial} in {}", dir.display()))?;
    if entry.name == GANGD_NAME {
        bail!("{serial} is gangd's own certificate: make a new CA instead");
    }
    if entry.revoked.is_none() {
        entry.revoked = Some(OffsetDateTime::now_utc().unix_timestamp());
    }
    let done = entry.clone();
    save_index(dir, &index)?;
    write_crl(dir, &issuer, &index)?;
    Ok(done)
}
