//! A throw-away cluster CA for tests (of this crate, the node crate and
//! the integration tests): real certificates made by ca.rs in a scratch
//! directory, so every test goes through the same verification as a real
//! cluster.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ca, handshake, ClientTls, ServerTls, Session};

/// A CA in a scratch directory, removed when dropped.
pub struct TestCa {
    pub root: PathBuf,
}

impl TestCa {
    /// A fresh CA under the system's temp dir; `tag` names it.
    pub fn new(tag: &str) -> TestCa {
        let root = std::env::temp_dir().join(format!("gang-ca-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        ca::init(&root.join("ca")).expect("making a test CA");
        TestCa { root }
    }

    /// The CA directory (what gangd's --ca-dir is).
    pub fn dir(&self) -> PathBuf {
        self.root.join("ca")
    }

    /// Issues `node` a certificate (once) and returns its TLS directory.
    pub fn node_dir(&self, node: &str) -> PathBuf {
        let out = self.root.join(format!("node-{node}"));
        if !out.join("node.crt").exists() {
            ca::issue(&self.dir(), node, &out, 30).expect("issuing a test certificate");
        }
        out
    }

    pub fn server(&self) -> Arc<ServerTls> {
        Arc::new(ServerTls::load(&self.dir()).expect("loading the test CA as gangd"))
    }

    pub fn client(&self, node: &str) -> Arc<ClientTls> {
        Arc::new(ClientTls::load(&self.node_dir(node)).expect("loading a test node"))
    }
}

impl Drop for TestCa {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A connected pair over loopback: (node's end, gangd's end).
pub fn session_pair(server: &ServerTls, client: &ClientTls) -> (Arc<Session>, Arc<Session>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let config = server.config();
    let accept = std::thread::spawn(move || {
        let (s, _) = listener.accept().unwrap();
        let conn = rustls::ServerConnection::new(config).unwrap();
        handshake(s, conn, Instant::now() + Duration::from_secs(10)).unwrap()
    });
    let s = TcpStream::connect(addr).unwrap();
    let node = handshake(
        s,
        client.connection().unwrap(),
        Instant::now() + Duration::from_secs(10),
    )
    .unwrap();
    (Arc::new(node), Arc::new(accept.join().unwrap()))
}

/// Copies a node's TLS directory (to make a variant of it in a test).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for f in ["ca.crt", "node.crt", "node.key"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
}

/// A node's TLS connection to gangd at `addr` (a fake agent's).
pub fn connect(
    addr: impl std::net::ToSocketAddrs,
    client: &ClientTls,
) -> std::io::Result<Arc<Session>> {
    let s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let conn = client
        .connection()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(Arc::new(handshake(
        s,
        conn,
        Instant::now() + Duration::from_secs(10),
    )?))
}

/// A server config from any certificate and key, without the checks
/// ServerTls::load makes: what an impostor would run (a node's own
/// certificate, another CA's "gangd"), to show that agents refuse it.
pub fn impostor_config(ca_crt: &Path, cert: &Path, key: &Path) -> Arc<rustls::ServerConfig> {
    let ca = super::load_certs(ca_crt).unwrap();
    let certs = super::load_certs(cert).unwrap();
    let key = super::load_key(key).unwrap();
    super::server_config(&ca, &certs, &key, Path::new("/nonexistent")).unwrap()
}
