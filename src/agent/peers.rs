//! The jobs' peer tables on this node: what a rank is told of its peers.
//!
//! gangd sends a job's table once per node (ToAgent::JobPeers, before the
//! job's StartJob; gang_wire::proto::peers has the format): nodes by id,
//! their addresses in the node directory the handler keeps (gang-wire's
//! proto/directory.rs). The handler checks and expands it at once
//! (`expand`) into the list ranks have always had, the job worker keeps
//! it (`set`), and each rank started gets it (`env`): in GANG_PEERS when it
//! fits in one environment string (MAX_ARG_STRLEN), else in a file named by
//! GANG_PEERS_FILE, written once per job, owned by the job's user and
//! readable by nobody else (mode 0400 in a root-owned directory below
//! /run), and removed with the job. GANG_PORT is the rank's own port.
//! The table also says which ranks StartJob starts here (`ranks_of`).
//!
//! A table lives until every rank the table gives this node was started
//! (or failed to) and none of them runs here any more (`release`); gangd
//! sends StartJob right after the table, so that is soon. Tables are
//! bounded in number (MAX_TABLES, past which the oldest job's goes) and
//! size (peers.rs in gang-wire), so a broken gangd cannot make the node
//! hold unbounded memory.
//!
//! Known faults: a table whose StartJob never comes (gangd lost in
//! between) is held until MAX_TABLES newer ones came, the same job's
//! table comes again or the agent restarts; a file of a job adopted by a
//! restarted agent is removed with the job only if the job ends while
//! this agent runs; the oldest table dropped past MAX_TABLES takes its
//! file with it, even if a rank of that job still runs (it read the file
//! at its start, as the workloads do).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{chown, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use gang_wire::proto::peers::{fits_in_env, PEERS_ENV, PEERS_FILE_ENV};
use gang_wire::proto::{Directory, JobId, JobMap, NODE_MAX_GANGS};

/// Most tables held at once: a node runs at most NODE_MAX_GANGS jobs, and
/// a job's table may come while the previous job here is still ending.
pub const MAX_TABLES: usize = 2 * NODE_MAX_GANGS;

/// One job's list and what is left to start.
struct Entry {
    /// Ranks of the job.
    size: u32,
    /// "host:port" of every rank, joined with ','.
    list: String,
    /// This node's ranks and their ports.
    ports: BTreeMap<u32, u16>,
    /// Ranks of this node not started yet.
    unstarted: BTreeSet<u32>,
    /// The list's file, once written.
    file: Option<PathBuf>,
}

pub struct PeerTables {
    /// Where the files go (below /run, one directory per node name).
    dir: PathBuf,
    jobs: Mutex<BTreeMap<JobId, Entry>>,
}

/// JobPeers: checks `map` against the node directory and expands it
/// into every rank's list and this node's ranks with their ports; `Err`
/// says what is wrong (a map off the network is bounded: gang-wire's
/// proto/peers.rs).
pub fn expand(job: JobId, map: &JobMap, dir: &Directory) -> Result<Expanded, String> {
    let me = dir
        .me()
        .ok_or_else(|| format!("job {job}: a peer table before gangd sent the node directory"))?;
    let list = map
        .expand(dir)
        .map_err(|e| format!("job {job}: refusing its {e}"))?;
    Ok(Expanded {
        size: map.size,
        list,
        mine: map.ranks_of(me),
    })
}

/// A job's table checked and expanded (`expand`).
pub struct Expanded {
    /// Ranks of the job.
    pub size: u32,
    /// "host:port" of every rank, joined with ','.
    pub list: String,
    /// This node's ranks and their ports, in rank order.
    pub mine: Vec<(u32, u16)>,
}

/// A node's name as a directory name: agents sharing a host (tests) never
/// share a directory.
pub fn node_dir(base: &Path, node: &str) -> PathBuf {
    base.join(
        node.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect::<String>(),
    )
}

impl PeerTables {
    pub fn new(node: &str) -> Self {
        Self::in_dir(node_dir(Path::new("/run/scx_gang-peers"), node))
    }

    pub fn in_dir(dir: PathBuf) -> Self {
        Self {
            dir,
            jobs: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<JobId, Entry>> {
        self.jobs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The list file of `job`.
    pub fn file_of(&self, job: JobId) -> PathBuf {
        self.dir.join(format!("job{}", job.0))
    }

    /// JobPeers, expanded (`expand`). A table of the same job replaces
    /// the one held.
    pub fn set(&self, job: JobId, table: Expanded) -> Result<(), String> {
        let mut jobs = self.lock();
        if !jobs.contains_key(&job) && jobs.len() >= MAX_TABLES {
            // The oldest job's: far more tables than jobs can run here, so
            // it is one whose StartJob never came.
            if let Some((old, e)) = jobs.pop_first() {
                log::warn!("{MAX_TABLES} peer tables held: job {old}'s dropped for job {job}'s");
                remove_file(e.file);
            }
        }
        let entry = Entry {
            size: table.size,
            unstarted: table.mine.iter().map(|&(r, _)| r).collect(),
            ports: table.mine.into_iter().collect(),
            list: table.list,
            file: None,
        };
        if let Some(old) = jobs.insert(job, entry) {
            remove_file(old.file);
        }
        Ok(())
    }

    /// The environment of rank `rank` of `job`, run as `uid`:`gid`:
    /// GANG_PEERS or GANG_PEERS_FILE, and GANG_PORT.
    pub fn env(
        &self,
        job: JobId,
        rank: u32,
        uid: u32,
        gid: u32,
    ) -> Result<Vec<(String, String)>, String> {
        let mut jobs = self.lock();
        let Some(entry) = jobs.get_mut(&job) else {
            return Err(format!(
                "no peer table for job {job} (gangd sent no JobPeers before its StartJob)"
            ));
        };
        let mut env = Vec::with_capacity(2);
        if fits_in_env(&entry.list) {
            env.push((PEERS_ENV.to_string(), entry.list.clone()));
        } else {
            if entry.file.is_none() {
                let file = self.file_of(job);
                write_list(&self.dir, &file, &entry.list, uid, gid).map_err(|e| {
                    format!(
                        "its peer list ({} bytes) is too long for {PEERS_ENV} and cannot be written to {}: {e}",
                        entry.list.len(),
                        file.display()
                    )
                })?;
                entry.file = Some(file);
            }
            let file = entry.file.as_ref().expect("written above");
            env.push((PEERS_FILE_ENV.to_string(), file.display().to_string()));
        }
        if let Some(port) = entry.ports.get(&rank) {
            env.push(("GANG_PORT".to_string(), port.to_string()));
        }
        Ok(env)
    }

    /// The job's size and this node's ranks of it, in rank order, as its
    /// table says (None: no table of the job here).
    pub fn ranks_of(&self, job: JobId) -> Option<(u32, Vec<u32>)> {
        let jobs = self.lock();
        let e = jobs.get(&job)?;
        Some((e.size, e.ports.keys().copied().collect()))
    }

    /// The job will not start here: no rank waits for its table any more.
    pub fn forget(&self, job: JobId) {
        if let Some(e) = self.lock().get_mut(&job) {
            e.unstarted.clear();
        }
    }

    /// Rank `rank` of `job` was started or failed to: the table is no
    /// longer waited for by it.
    pub fn started(&self, job: JobId, rank: u32) {
        if let Some(e) = self.lock().get_mut(&job) {
            e.unstarted.remove(&rank);
        }
    }

    /// No rank of `job` runs here: its table and file go, unless a rank of
    /// it is still to start. A job with no table (adopted) loses its file.
    pub fn release(&self, job: JobId) {
        let mut jobs = self.lock();
        match jobs.get(&job) {
            Some(e) if !e.unstarted.is_empty() => {}
            Some(_) => remove_file(jobs.remove(&job).and_then(|e| e.file)),
            None => remove_file(Some(self.file_of(job))),
        }
    }

    /// How many tables are held (tests).
    pub fn held(&self) -> usize {
        self.lock().len()
    }
}

fn remove_file(file: Option<PathBuf>) {
    if let Some(f) = file {
        match fs::remove_file(&f) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => log::warn!("removing peer list {}: {e}", f.display()),
        }
    }
}

/// Writes `list` to `file` in `dir` (made root's, 0711: anyone may pass,
/// nobody list it) as a new file of `uid`:`gid`, mode 0400.
fn write_list(dir: &Path, file: &Path, list: &str, uid: u32, gid: u32) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    for d in dir.ancestors().take(2) {
        fs::set_permissions(d, fs::Permissions::from_mode(0o711))?;
    }
    match fs::remove_file(file) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o400)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)?;
    let written = f
        .write_all(list.as_bytes())
        .and_then(|()| f.write_all(b"\n"))
        .and_then(|()| chown(file, Some(uid), Some(gid)));
    if written.is_err() {
        let _ = fs::remove_file(file);
    }
    written
}
