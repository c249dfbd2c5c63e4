//! Prepare: can this node start a job's ranks? Checked before any rank
//! starts anywhere, so a typo in the program name is one clear refusal
//! instead of a job with half its ranks running. Nothing is started here.
//!
//! The program is found the way SpawnRank finds it (the same function), so
//! what Prepare accepts is what SpawnRank executes: a name with a '/' is a
//! path (relative to the job's cwd), a bare name is looked up in the job's
//! PATH, or the node's PATH if the job has none.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// When neither the job nor the node has a PATH.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The answer to Prepare: None if the job can start here, else why not,
/// prefixed with the node's name.
pub fn check(
    node: &str,
    argv: &[String],
    env: &[(String, String)],
    cwd: &str,
    uid: u32,
    gid: u32,
) -> Option<String> {
    check_job(argv, env, cwd, uid, gid)
        .err()
        .map(|why| format!("{node}: {why}"))
}

fn check_job(
    argv: &[String],
    env: &[(String, String)],
    cwd: &str,
    uid: u32,
    gid: u32,
) -> Result<PathBuf, String> {
    let program = argv.first().ok_or("empty command (no program)")?;
    match fs::metadata(cwd) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(format!("cwd {cwd}: not a directory")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!("cwd {cwd}: no such directory"))
        }
        Err(e) => return Err(format!("cwd {cwd}: {e}")),
    }
    find_program(program, env, Path::new(cwd), uid, gid)
}

/// Why a candidate file cannot be the program.
enum Unfit {
    Missing,
    Other(String),
}

/// The file `program` names for a job with `env` in `cwd`, executable by
/// `uid`/`gid`; else a clear reason.
pub fn find_program(
    program: &str,
    env: &[(String, String)],
    cwd: &Path,
    uid: u32,
    gid: u32,
) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err("empty program name".into());
    }
    if program.contains('/') {
        let path = cwd.join(program);
        return match fit(&path, uid, gid) {
            Ok(()) => Ok(path),
            Err(Unfit::Missing) => Err(format!("{}: no such file", path.display())),
            Err(Unfit::Other(why)) => Err(why),
        };
    }
    let search = env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_else(|| DEFAULT_PATH.into());
    let mut first_unfit = None;
    for dir in search.split(':') {
        // An empty entry is the current directory, as for execvp.
        let candidate = cwd.join(dir).join(program);
        match fit(&candidate, uid, gid) {
            Ok(()) => return Ok(candidate),
            Err(Unfit::Missing) => {}
            Err(Unfit::Other(why)) => {
                first_unfit.get_or_insert(why);
            }
        }
    }
    Err(first_unfit.unwrap_or_else(|| format!("{program}: not found in PATH {search}")))
}

fn fit(path: &Path, uid: u32, gid: u32) -> Result<(), Unfit> {
    let show = path.display();
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Err(Unfit::Missing)
        }
        Err(e) => return Err(Unfit::Other(format!("{show}: {e}"))),
    };
    if !meta.is_file() {
        return Err(Unfit::Other(format!("{show}: not a regular file")));
    }
    if !may_execute(meta.mode(), meta.uid(), meta.gid(), uid, gid) {
        return Err(Unfit::Other(format!(
            "{show}: not executable by uid {uid} gid {gid} (mode {:03o}, owner {}:{})",
            meta.mode() & 0o777,
            meta.uid(),
            meta.gid()
        )));
    }
    Ok(())
}

/// The kernel's rule for the mode bits: root needs any x bit; the owner
/// is judged by the owner's bits only, the group (the rank runs with its
/// primary group only) by the group's, everyone else by the others'.
pub fn may_execute(mode: u32, file_uid: u32, file_gid: u32, uid: u32, gid: u32) -> bool {
    let bits = if uid == 0 {
        0o111
    } else if uid == file_uid {
        0o100
    } else if gid == file_gid {
        0o010
    } else {
        0o001
    };
    mode & bits != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn mode_bits_are_judged_like_the_kernel() {
        assert!(may_execute(0o100, 5, 5, 0, 0), "root: any x bit");
        assert!(!may_execute(0o644, 5, 5, 0, 0), "root: but one is needed");
        assert!(may_execute(0o700, 1000, 1000, 1000, 1000));
        assert!(
            !may_execute(0o071, 1000, 1000, 1000, 1000),
            "the owner is judged by the owner's bits only"
        );
        assert!(may_execute(0o010, 0, 100, 1000, 100));
        assert!(!may_execute(0o701, 0, 100, 1000, 100));
        assert!(may_execute(0o001, 0, 0, 1000, 1000));
        assert!(!may_execute(0o770, 0, 0, 1000, 1000));
    }

    #[test]
    fn answers_name_the_node_and_the_problem() {
        let env = vec![("PATH".to_string(), "/usr/bin:/bin".to_string())];
        let argv = |p: &str| vec![p.to_string()];
        assert_eq!(check("n1", &argv("/bin/sh"), &env, "/", 0, 0), None);
        assert_eq!(check("n1", &argv("sh"), &env, "/", 0, 0), None);
        assert_eq!(
            check("node3", &argv("/bin/nope"), &env, "/", 0, 0).unwrap(),
            "node3: /bin/nope: no such file"
        );
        assert_eq!(
            check("n1", &argv("nope-nope"), &env, "/", 0, 0).unwrap(),
            "n1: nope-nope: not found in PATH /usr/bin:/bin"
        );
        assert_eq!(
            check("n1", &argv("/bin/sh"), &env, "/nonexistent/x", 0, 0).unwrap(),
            "n1: cwd /nonexistent/x: no such directory"
        );
        assert_eq!(
            check("n1", &[], &env, "/", 0, 0).unwrap(),
            "n1: empty command (no program)"
        );
        assert!(check("n1", &argv("/etc"), &env, "/", 0, 0)
            .unwrap()
            .contains("/etc: not a regular file"));
    }

    #[test]
    fn relative_paths_and_path_entries_start_at_the_cwd() {
        let dir = std::env::temp_dir().join(format!("scx-gang-prepare-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("bin")).unwrap();
        let prog = dir.join("bin/prog");
        fs::write(&prog, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&prog, fs::Permissions::from_mode(0o644)).unwrap();
        let env = vec![("PATH".to_string(), "bin".to_string())];
        let err = find_program("prog", &env, &dir, 0, 0).unwrap_err();
        assert!(
            err.contains("not executable by uid 0 gid 0 (mode 644"),
            "{err}"
        );
        fs::set_permissions(&prog, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_program("prog", &env, &dir, 0, 0).unwrap(), prog);
        assert_eq!(
            find_program("./bin/prog", &[], &dir, 0, 0).unwrap(),
            dir.join("./bin/prog")
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
