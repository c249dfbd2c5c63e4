//! Admission of agents: an agent proves it knows the cluster key without
//! sending it. gangd sends Challenge{nonce} (fresh random bytes per
//! connection); the agent answers in Hello with
//! HMAC-SHA256(key, DOMAIN || nonce || node name). A fresh nonce makes a
//! recorded proof useless on another connection; the node name in the MAC
//! stops a proof from being passed off as another node's.
//!
//! The key is a file only root can read, the same on every node and on
//! gangd's host. Its content (surrounding whitespace trimmed) is the key;
//! `generate_key` writes 32 random bytes in hex.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use anyhow::{bail, Context, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const NONCE_LEN: usize = 32;
/// 256 bits, the strength of HMAC-SHA256.
pub const MIN_KEY_LEN: usize = 32;
/// A key file larger than this is surely not a key file.
const MAX_KEY_FILE: u64 = 4096;
/// Keeps a MAC made for this purpose from being valid for any other use of
/// the same key (a later protocol version, another message).
const DOMAIN: &[u8] = b"scx_gang agent hello v1\0";

type HmacSha256 = Hmac<Sha256>;

/// The shared secret. Debug does not print it, so it cannot leak into logs.
#[derive(Clone)]
pub struct ClusterKey(Vec<u8>);

impl fmt::Debug for ClusterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClusterKey({} bytes)", self.0.len())
    }
}

impl ClusterKey {
    pub fn from_bytes(key: Vec<u8>) -> Result<Self> {
        if key.len() < MIN_KEY_LEN {
            bail!(
                "cluster key is {} bytes, at least {MIN_KEY_LEN} are needed",
                key.len()
            );
        }
        Ok(Self(key))
    }

    fn mac(&self, nonce: &[u8], node: &str) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        // Unambiguous without length prefixes: DOMAIN and the nonce have
        // fixed lengths (verify refuses other nonce lengths), the name is
        // the rest.
        mac.update(DOMAIN);
        mac.update(nonce);
        mac.update(node.as_bytes());
        mac
    }
}

/// A fresh challenge nonce from the OS's random source.
pub fn new_nonce() -> Result<[u8; NONCE_LEN]> {
    let mut nonce = [0; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(|e| anyhow::anyhow!("no random bytes from the OS: {e}"))?;
    Ok(nonce)
}

/// The agent's answer to a challenge.
pub fn prove(key: &ClusterKey, nonce: &[u8], node: &str) -> Vec<u8> {
    key.mac(nonce, node).finalize().into_bytes().to_vec()
}

/// gangd's check of a Hello; the comparison takes the same time whatever
/// the proof, so timing tells an attacker nothing about the right MAC.
pub fn verify(key: &ClusterKey, nonce: &[u8; NONCE_LEN], node: &str, proof: &[u8]) -> bool {
    key.mac(nonce, node).verify_slice(proof).is_ok()
}

/// Reads the cluster key, refusing a file that others could read: anyone
/// who can read it can join the cluster and run jobs as any user.
pub fn load_key(path: &Path) -> Result<ClusterKey> {
    let show = path.display();
    let file = File::open(path).with_context(|| format!("opening cluster key {show}"))?;
    // Checked on the open file, so the file checked is the file read.
    let meta = file
        .metadata()
        .with_context(|| format!("reading the mode of {show}"))?;
    if !meta.is_file() {
        bail!("cluster key {show} is not a regular file");
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!("cluster key {show} has mode {mode:03o}: it must be readable by its owner only (chmod 600 {show})");
    }
    let mut content = Vec::new();
    file.take(MAX_KEY_FILE + 1)
        .read_to_end(&mut content)
        .with_context(|| format!("reading {show}"))?;
    if content.len() as u64 > MAX_KEY_FILE {
        bail!("cluster key {show} is larger than {MAX_KEY_FILE} bytes: not a key file");
    }
    let key = content.trim_ascii().to_vec();
    ClusterKey::from_bytes(key).with_context(|| format!("cluster key {show} is too short"))
}

/// Writes a new key: 32 random bytes in hex, mode 0600 from creation (never
/// readable by others, not even for a moment). Refuses to replace an
/// existing key, which would lock every node out.
pub fn generate_key(path: &Path) -> Result<()> {
    let show = path.display();
    let mut bytes = [0u8; MIN_KEY_LEN];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no random bytes from the OS: {e}"))?;
    let mut text: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    text.push('\n');
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| {
            format!("creating cluster key {show} (an existing key is never replaced)")
        })?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {show}"))?;
    file.sync_all().with_context(|| format!("writing {show}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::PathBuf;

    fn scratch_dir(test: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gang-auth-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn key(byte: u8) -> ClusterKey {
        ClusterKey::from_bytes(vec![byte; 32]).unwrap()
    }

    #[test]
    fn the_right_key_is_accepted() {
        let nonce = new_nonce().unwrap();
        let proof = prove(&key(1), &nonce, "node3");
        assert_eq!(proof.len(), 32);
        assert!(verify(&key(1), &nonce, "node3", &proof));
    }

    #[test]
    fn a_wrong_key_nonce_or_name_is_refused() {
        let nonce = new_nonce().unwrap();
        let proof = prove(&key(1), &nonce, "node3");
        assert!(!verify(&key(2), &nonce, "node3", &proof), "wrong key");
        let mut other_nonce = nonce;
        other_nonce[31] ^= 1;
        assert!(
            !verify(&key(1), &other_nonce, "node3", &proof),
            "wrong nonce"
        );
        assert!(!verify(&key(1), &nonce, "node4", &proof), "wrong node name");
        assert!(
            !verify(&key(1), &nonce, "node3", &proof[..31]),
            "short proof"
        );
        assert!(!verify(&key(1), &nonce, "node3", &[]), "empty proof");
    }

    #[test]
    fn a_proof_replayed_on_a_new_challenge_is_refused() {
        let first = new_nonce().unwrap();
        let second = new_nonce().unwrap();
        assert_ne!(first, second, "nonces must be fresh");
        let recorded = prove(&key(1), &first, "node3");
        assert!(!verify(&key(1), &second, "node3", &recorded));
    }

    #[test]
    fn a_generated_key_loads_and_is_private() {
        let dir = scratch_dir("gen");
        let path = dir.join("cluster.key");
        generate_key(&path).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let text = fs::read_to_string(&path).unwrap();
        assert_eq!(text.trim().len(), 64);
        assert!(text.trim().bytes().all(|b| b.is_ascii_hexdigit()));
        let loaded = load_key(&path).unwrap();
        assert_eq!(loaded.0, text.trim().as_bytes());
        let err = generate_key(&path).unwrap_err();
        assert!(format!("{err:#}").contains("never replaced"), "{err:#}");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_key_readable_by_others_is_refused() {
        let dir = scratch_dir("mode");
        let path = dir.join("cluster.key");
        fs::write(&path, "a".repeat(64)).unwrap();
        for mode in [0o644, 0o640, 0o604, 0o660, 0o610] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            let err = load_key(&path).unwrap_err().to_string();
            assert!(err.contains(&format!("mode {mode:03o}")), "{err}");
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o400)).unwrap();
        assert!(load_key(&path).is_ok());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_short_huge_or_missing_key_is_refused() {
        let dir = scratch_dir("short");
        let path = dir.join("cluster.key");
        fs::write(&path, format!("{}\n", "a".repeat(31))).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        let err = format!("{:#}", load_key(&path).unwrap_err());
        assert!(err.contains("31 bytes, at least 32"), "{err}");
        fs::write(&path, vec![b'a'; 5000]).unwrap();
        assert!(load_key(&path)
            .unwrap_err()
            .to_string()
            .contains("not a key file"));
        assert!(load_key(&dir.join("absent")).is_err());
        assert!(load_key(&dir).is_err(), "a directory is no key");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn debug_does_not_print_the_key() {
        assert_eq!(format!("{:?}", key(b'S')), "ClusterKey(32 bytes)");
    }
}
