//! One job split over two "nodes" on this host: libpmix is a singleton,
//! so node B is a second process (this test binary run again as the
//! ignored test `node_b`), with its own server. Each node's host sends its
//! fence blob to the other side over a Unix socket; node A's test joins
//! the two blobs (A's then B's) and completes both fences with the join,
//! as gangd will between agents.
//!
//! Node B is told everything through the environment (GANG_PMIX_B_*), and
//! exits non-zero if any of its ranks failed.
mod common;

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use common::{assert_all_ok, assert_said, build, fixture_as, have, pmix_flags, run_ranks};
use gang_pmix::{FenceDone, Host, PmixJob, Proc, Server};

const LIMIT: Duration = Duration::from_secs(120);

fn write_frame(s: &mut UnixStream, data: &[u8]) -> std::io::Result<()> {
    s.write_all(&(data.len() as u64).to_le_bytes())?;
    s.write_all(data)
}

fn read_frame(s: &mut UnixStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 8];
    s.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len) as usize;
    assert!(len <= 64 << 20, "a test frame of {len} bytes");
    let mut data = vec![0u8; len];
    s.read_exact(&mut data)?;
    Ok(data)
}

fn spec(nspace: &str, size: u32, this_node: usize) -> PmixJob {
    // Ranks alternate between the nodes: 0,2 on A; 1 on B (size 3).
    let a: Vec<u32> = (0..size).filter(|r| r % 2 == 0).collect();
    let b: Vec<u32> = (0..size).filter(|r| r % 2 == 1).collect();
    PmixJob {
        nspace: nspace.into(),
        size,
        nodes: vec!["nodeA".into(), "nodeB".into()],
        ranks_by_node: vec![a, b],
        this_node,
        uid: unsafe { libc::getuid() },
        gid: unsafe { libc::getgid() },
    }
}

/// Runs `exe args` as a job of `size` ranks over nodes A (here) and B (a
/// child process), relaying fences; panics unless every rank succeeded.
/// Each rank's stdout must have `said` (`{r}`: its rank).
fn split_job(
    nspace: &str,
    size: u32,
    exe: PathBuf,
    args: &[&str],
    env: &[(&str, &str)],
    said: &str,
) {
    let f = fixture_as(Some("nodeA"));
    let sock = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("{nspace}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let listener = UnixListener::bind(&sock).unwrap();
    let spec_a = spec(nspace, size, 0);
    f.server.register_job(&spec_a).unwrap();
    f.host.hold_fences(nspace);
    let env_text: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut node_b = Command::new(std::env::current_exe().unwrap())
        .args([
            "node_b",
            "--exact",
            "--ignored",
            "--quiet",
            "--test-threads=1",
        ])
        .env("GANG_PMIX_B_SOCK", &sock)
        .env("GANG_PMIX_B_NSPACE", nspace)
        .env("GANG_PMIX_B_SIZE", size.to_string())
        .env("GANG_PMIX_B_EXE", &exe)
        .env("GANG_PMIX_B_ARGS", args.join(" "))
        .env("GANG_PMIX_B_ENV", env_text.join(" "))
        .env("GANG_PMIX_B_SAID", said)
        .spawn()
        .unwrap();
    let (mut link, _) = listener.accept().unwrap();
    // The relay: one fence at a time, B's blob against A's.
    let ns = nspace.to_string();
    let relay = std::thread::spawn(move || {
        let mut fences = 0;
        while let Ok(b) = read_frame(&mut link) {
            let (a, done) = fixture_as(None)
                .host
                .take_held(&ns, 1, LIMIT)
                .into_iter()
                .next()
                .unwrap();
            let mut joined = a;
            joined.extend_from_slice(&b);
            write_frame(&mut link, &joined).unwrap();
            done.complete(Ok(joined));
            fences += 1;
        }
        fences
    });
    let outs = run_ranks(
        &f.server,
        nspace,
        spec_a.local_ranks(),
        &exe,
        args,
        env,
        LIMIT,
    );
    let b_status = node_b.wait().unwrap();
    let fences = relay.join().unwrap();
    assert_all_ok(&outs);
    assert_said(&outs, spec_a.local_ranks(), said);
    assert!(b_status.success(), "node B's ranks: {b_status:?}");
    assert!(fences >= 1, "the fence went through the relay");
    f.server.deregister_job(nspace);
}

/// Node B's host: each fence's blob goes to node A, the join comes back.
struct NodeB {
    to_relay: std::sync::Mutex<mpsc::Sender<(Vec<u8>, FenceDone)>>,
}

impl Host for NodeB {
    fn abort(&self, nspace: &str, rank: u32, status: i32, msg: &str, _: &[Proc]) {
        eprintln!("node B: abort of {nspace}:{rank} with {status}: {msg}");
    }
    fn fence(&self, _: &str, _: &[Proc], data: Vec<u8>, _: bool, done: FenceDone) {
        let _ = self.to_relay.lock().unwrap().send((data, done));
    }
}

#[test]
#[ignore = "node B of the two-node tests, started by them"]
fn node_b() {
    if std::env::var_os("GANG_PMIX_B_SOCK").is_none() {
        eprintln!("node_b is node B of the two-node tests, not a test by itself: nothing to do");
        return;
    }
    let var =
        |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k}: set by the two-node tests"));
    let (nspace, size) = (
        var("GANG_PMIX_B_NSPACE"),
        var("GANG_PMIX_B_SIZE").parse::<u32>().unwrap(),
    );
    let link = UnixStream::connect(var("GANG_PMIX_B_SOCK")).unwrap();
    let (tx, rx) = mpsc::channel::<(Vec<u8>, FenceDone)>();
    let mut back = link.try_clone().unwrap();
    std::thread::spawn(move || {
        for (blob, done) in rx {
            write_frame(&mut back, &blob).unwrap();
            done.complete(Ok(read_frame(&mut back).unwrap()));
        }
    });
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("pmix-b-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let server = Server::start_as(
        &dir,
        Some("nodeB"),
        Arc::new(NodeB {
            to_relay: tx.into(),
        }),
    )
    .unwrap();
    let spec_b = spec(&nspace, size, 1);
    server.register_job(&spec_b).unwrap();
    let args = var("GANG_PMIX_B_ARGS");
    let args: Vec<&str> = args.split_whitespace().collect();
    let env = var("GANG_PMIX_B_ENV");
    let env: Vec<(&str, &str)> = env
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let outs = run_ranks(
        &server,
        &nspace,
        spec_b.local_ranks(),
        var("GANG_PMIX_B_EXE").as_ref(),
        &args,
        &env,
        LIMIT,
    );
    assert_all_ok(&outs);
    assert_said(&outs, spec_b.local_ranks(), &var("GANG_PMIX_B_SAID"));
    link.shutdown(std::net::Shutdown::Both).unwrap();
}

#[test]
fn pmix_clients_on_two_nodes_get_each_others_keys_through_the_joined_fence() {
    if !have(false) {
        return;
    }
    split_job(
        "split-c",
        3,
        build("client.c", "cc", &pmix_flags()),
        &["put"],
        &[],
        "ok split-c:{r}",
    );
}

#[test]
fn an_open_mpi_job_over_two_nodes_finishes_with_correct_results() {
    if !have(true) {
        return;
    }
    let env = gang_pmix::OMPI_ENV.to_vec();
    split_job(
        "split-mpi",
        3,
        build("mpi_ring.c", "mpicc.openmpi", &[]),
        &[],
        &env,
        "ok rank {r} of 3",
    );
}
