//! What gangd keeps across its restarts, in `--state-dir` (default
//! /var/lib/gangd): the next job id and the names of the nodes that have
//! ever joined.
//!
//! # Why
//!
//! Ranks outlive gangd: after a restart the nodes report the jobs they
//! still run (Hello's `jobs`) and gangd adopts them under their old ids. If
//! ids started again at 1, a node rejoining late with user A's job 1 would
//! be merged into user B's new job 1 (B would get A's output and could kill
//! A's ranks). So ids are never handed out twice: the next id is written
//! (and synced) before a job gets its id, and the nodes known before the
//! restart tell gangd when adoption is over (every one of them is back, or
//! the adoption grace has passed); no job is accepted before that.
//!
//! # Format
//!
//! One JSON object in `state.json`, written to a temporary file, synced and
//! renamed over the old one (a crash leaves the old or the new state, never
//! half of one). A file that cannot be read or parsed stops gangd at start
//! with the reason: guessing would risk reusing ids.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// Node names kept at most: a CA issues a certificate per node, so this is
/// far above any real cluster and only bounds a runaway file.
pub const MAX_NODES: usize = 100_000;

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Persisted {
    /// Every job id handed out so far is below this; the next submission
    /// gets this one or a later one.
    pub next_job: u64,
    /// Every node that has joined this cluster.
    pub nodes: BTreeSet<String>,
}

/// The state file and what it holds now.
pub struct State {
    path: PathBuf,
    pub data: Persisted,
    /// `data` holds nodes not yet written (note_node; flush writes them).
    unsaved: bool,
}

impl State {
    /// Reads `dir/state.json`, making `dir` (0700) if needed; a missing
    /// file is a first start (next id 1, no nodes).
    pub fn open(dir: &Path) -> Result<State> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating the state directory {}", dir.display()))?;
        let path = dir.join("state.json");
        let data = match fs::read(&path) {
            Ok(bytes) => {
                let d: Persisted = serde_json::from_slice(&bytes).with_context(|| {
                    format!(
                        "{} is damaged (fix or remove it; removing it lets job ids repeat \
                         those of jobs still running)",
                        path.display()
                    )
                })?;
                if d.next_job == 0 || d.nodes.len() > MAX_NODES {
                    bail!("{}: next_job 0 or too many nodes", path.display());
                }
                d
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Persisted {
                next_job: 1,
                nodes: BTreeSet::new(),
            },
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Ok(State {
            path,
            data,
            unsaved: false,
        })
    }

    /// Writes the state durably: temporary file, fsync, rename, fsync of
    /// the directory.
    pub fn save(&mut self) -> io::Result<()> {
        let tmp = self.path.with_extension("json.tmp");
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&serde_json::to_vec(&self.data).map_err(io::Error::other)?)?;
        f.sync_all()?;
        fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        self.unsaved = false;
        Ok(())
    }

    /// Records that ids below `next` are taken; written before the id is
    /// used, so an error means the id must not be handed out.
    pub fn reserve_ids_below(&mut self, next: u64) -> io::Result<()> {
        if next <= self.data.next_job {
            return Ok(());
        }
        let old = self.data.next_job;
        self.data.next_job = next;
        self.save().inspect_err(|_| self.data.next_job = old)
    }

    /// Records a node that joined, written by the next `flush` (or any
    /// save): gangd notes every node of a pass of its loop, then writes
    /// once. True if it is new.
    pub fn note_node(&mut self, name: &str) -> bool {
        if self.data.nodes.contains(name) || self.data.nodes.len() >= MAX_NODES {
            return false;
        }
        self.data.nodes.insert(name.to_string());
        self.unsaved = true;
        true
    }

    /// Writes the nodes noted since the last save, if any.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.unsaved {
            self.save()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gangd-state-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_first_start_hands_out_id_1_and_knows_no_node() {
        let d = dir("first");
        let s = State::open(&d).unwrap();
        assert_eq!(s.data.next_job, 1);
        assert!(s.data.nodes.is_empty());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            fs::metadata(&d).unwrap().permissions().mode() & 0o777,
            0o700
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn reserved_ids_and_nodes_survive_a_restart() {
        let d = dir("restart");
        let mut s = State::open(&d).unwrap();
        s.reserve_ids_below(8).unwrap();
        s.reserve_ids_below(5).unwrap(); // never goes back
        assert!(s.note_node("n0"));
        assert!(!s.note_node("n0"));
        s.flush().unwrap();
        let again = State::open(&d).unwrap();
        assert_eq!(again.data.next_job, 8);
        assert_eq!(again.data.nodes.iter().collect::<Vec<_>>(), ["n0"]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn noted_nodes_are_written_once_by_the_flush() {
        let d = dir("flush");
        let mut s = State::open(&d).unwrap();
        for n in ["n0", "n1", "n2"] {
            assert!(s.note_node(n));
        }
        assert!(!d.join("state.json").exists(), "noted, not yet written");
        s.flush().unwrap();
        let again = State::open(&d).unwrap();
        assert_eq!(again.data.nodes.len(), 3);
        // Nothing noted since: a flush writes nothing (the file may even
        // be gone without an error).
        fs::remove_file(d.join("state.json")).unwrap();
        s.flush().unwrap();
        assert!(!d.join("state.json").exists());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_damaged_file_stops_gangd_instead_of_restarting_ids() {
        let d = dir("damaged");
        State::open(&d).unwrap().reserve_ids_below(3).unwrap();
        fs::write(d.join("state.json"), b"{\"next_job\": 3, \"nod").unwrap();
        let e = State::open(&d).err().unwrap();
        assert!(format!("{e:#}").contains("damaged"), "{e:#}");
        fs::write(d.join("state.json"), b"{\"next_job\": 0, \"nodes\": []}").unwrap();
        assert!(State::open(&d).is_err());
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_id_that_cannot_be_recorded_is_not_reserved() {
        let d = dir("readonly");
        let mut s = State::open(&d).unwrap();
        // The file's place taken by a directory: the rename fails.
        fs::create_dir_all(d.join("state.json")).unwrap();
        assert!(s.reserve_ids_below(4).is_err());
        assert_eq!(s.data.next_job, 1);
        fs::remove_dir_all(&d).unwrap();
    }
}
