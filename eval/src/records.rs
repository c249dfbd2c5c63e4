//! The raw record format: one record per line, `TYPE key=value ...`.
//!
//! Blank lines and lines starting with `#` are ignored. Types: `meta`, `job`,
//! `cell`, `short` (see the crate README in the module docs of each struct).
//! A malformed line (unknown type, a token without `=`, an empty key, a key
//! given twice, a missing or empty required key, a non-number where a number
//! is needed, an impossible value) is a [`ParseError`] naming file and line.
//! Keys this crate does not know are kept in `extra`.

use std::collections::BTreeSet;
use std::fmt;
use std::path::Path;

/// Where a record came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loc {
    pub file: String,
    pub line: usize,
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// A malformed line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub loc: Loc,
    pub msg: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.loc, self.msg)
    }
}

impl std::error::Error for ParseError {}

/// Reading the input failed: a file could not be read, or a line is malformed.
#[derive(Debug)]
pub enum LoadError {
    Io { path: String, err: std::io::Error },
    Parse(ParseError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Io { path, err } => write!(f, "{path}: {err}"),
            LoadError::Parse(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LoadError {}

/// `meta k=v ...`: free facts about the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Meta {
    pub loc: Loc,
    pub pairs: Vec<(String, String)>,
}

/// `job ...`: one job of the batch matrix. In cell (policy, workload, mpl,
/// rep), `mpl` identical jobs were submitted at once; `idx` is 0..mpl-1.
/// Times are ms on the head node's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub loc: Loc,
    pub policy: String,
    pub workload: String,
    pub mpl: u32,
    pub rep: u32,
    pub idx: u32,
    pub submit_ms: f64,
    pub end_ms: f64,
    pub rc: i64,
    pub ranks: u32,
    pub ranks_ok: u32,
    /// The longest rank's own elapsed time; absent when the job failed.
    pub elapsed_s: Option<f64>,
    pub extra: Vec<(String, String)>,
}

impl Job {
    /// rc 0, at least one rank, and every rank reported ok.
    pub fn ok(&self) -> bool {
        is_ok(self.rc, self.ranks, self.ranks_ok)
    }
    /// Response time: submit to the exit of `gang run`, in seconds.
    pub fn time_s(&self) -> f64 {
        (self.end_ms - self.submit_ms) / 1000.0
    }
}

/// `cell ...`: slot switches gangd made during one cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub loc: Loc,
    pub policy: String,
    pub workload: String,
    pub mpl: u32,
    pub rep: u32,
    /// None when absent or empty (a policy without switching).
    pub switches: Option<u64>,
    pub extra: Vec<(String, String)>,
}

/// `short ...`: a short job submitted while `behind` long jobs run.
#[derive(Debug, Clone, PartialEq)]
pub struct Short {
    pub loc: Loc,
    pub policy: String,
    pub rep: u32,
    pub workload: String,
    pub behind: u32,
    pub long_workload: String,
    pub first_long_submit_ms: f64,
    pub submit_ms: f64,
    pub end_ms: f64,
    pub rc: i64,
    pub ranks: u32,
    pub ranks_ok: u32,
    pub extra: Vec<(String, String)>,
}

impl Short {
    pub fn ok(&self) -> bool {
        is_ok(self.rc, self.ranks, self.ranks_ok)
    }
    /// Response time in seconds.
    pub fn response_s(&self) -> f64 {
        (self.end_ms - self.submit_ms) / 1000.0
    }
}

fn is_ok(rc: i64, ranks: u32, ranks_ok: u32) -> bool {
    rc == 0 && ranks > 0 && ranks_ok == ranks
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Meta(Meta),
    Job(Job),
    Cell(Cell),
    Short(Short),
}

impl Record {
    pub fn policy(&self) -> Option<&str> {
        match self {
            Record::Meta(_) => None,
            Record::Job(j) => Some(&j.policy),
            Record::Cell(c) => Some(&c.policy),
            Record::Short(s) => Some(&s.policy),
        }
    }
}

/// Every record of a run, in file and line order per type, plus the order
/// in which policies and workloads were first seen.
#[derive(Debug, Clone, Default)]
pub struct Log {
    pub files: Vec<String>,
    pub meta: Vec<Meta>,
    pub jobs: Vec<Job>,
    pub cells: Vec<Cell>,
    pub shorts: Vec<Short>,
    /// Policies in the order first seen (any record type).
    pub policies: Vec<String>,
    /// Workloads in the order first seen (job and cell records, then the
    /// short scenario's).
    pub workloads: Vec<String>,
}

impl Log {
    /// Reads and parses every file, in the order given.
    pub fn load<P: AsRef<Path>>(paths: &[P]) -> Result<Log, LoadError> {
        let mut log = Log::default();
        for p in paths {
            let path = p.as_ref();
            let name = path.display().to_string();
            let bytes = std::fs::read(path).map_err(|err| LoadError::Io {
                path: name.clone(),
                err,
            })?;
            log.add_bytes(&name, &bytes).map_err(LoadError::Parse)?;
        }
        Ok(log)
    }

    /// Parses one file's contents (UTF-8 is checked line by line so that a
    /// bad byte is reported with its line).
    pub fn add_bytes(&mut self, file: &str, bytes: &[u8]) -> Result<(), ParseError> {
        self.files.push(file.to_string());
        for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
            let loc = Loc {
                file: file.to_string(),
                line: i + 1,
            };
            let text = std::str::from_utf8(raw).map_err(|_| ParseError {
                loc: loc.clone(),
                msg: "not UTF-8 text".into(),
            })?;
            if let Some(rec) = parse_line(text, &loc)? {
                self.push(rec);
            }
        }
        Ok(())
    }

    /// Parses one file's contents given as text.
    pub fn add_str(&mut self, file: &str, text: &str) -> Result<(), ParseError> {
        self.add_bytes(file, text.as_bytes())
    }

    /// Adds one record.
    pub fn push(&mut self, rec: Record) {
        if let Some(p) = rec.policy() {
            note(&mut self.policies, p);
        }
        match rec {
            Record::Meta(m) => self.meta.push(m),
            Record::Job(j) => {
                note(&mut self.workloads, &j.workload);
                self.jobs.push(j)
            }
            Record::Cell(c) => {
                note(&mut self.workloads, &c.workload);
                self.cells.push(c)
            }
            Record::Short(s) => self.shorts.push(s),
        }
    }

    /// The meta facts merged over files: each key (first-seen order) with
    /// its distinct values (first-seen order), each with the files that gave it.
    pub fn merged_meta(&self) -> Vec<(String, MetaValues)> {
        let mut out: Vec<(String, MetaValues)> = Vec::new();
        for m in &self.meta {
            for (k, v) in &m.pairs {
                let idx = match out.iter().position(|(key, _)| key == k) {
                    Some(i) => i,
                    None => {
                        out.push((k.clone(), Vec::new()));
                        out.len() - 1
                    }
                };
                let vals = &mut out[idx].1;
                let vi = match vals.iter().position(|(val, _)| val == v) {
                    Some(i) => i,
                    None => {
                        vals.push((v.clone(), Vec::new()));
                        vals.len() - 1
                    }
                };
                note(&mut vals[vi].1, &m.loc.file);
            }
        }
        out
    }
}

/// The distinct values of one meta key, each with the files that gave it.
pub type MetaValues = Vec<(String, Vec<String>)>;

fn note(list: &mut Vec<String>, name: &str) {
    if !list.iter().any(|x| x == name) {
        list.push(name.to_string());
    }
}

/// The key=value tokens of one line, consumed by the typed getters.
struct Fields<'a> {
    loc: &'a Loc,
    pairs: Vec<(&'a str, &'a str)>,
    used: BTreeSet<&'a str>,
}

impl<'a> Fields<'a> {
    fn err(&self, msg: String) -> ParseError {
        ParseError {
            loc: self.loc.clone(),
            msg,
        }
    }

    fn raw(&mut self, key: &'a str) -> Option<&'a str> {
        self.used.insert(key);
        self.pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    fn string(&mut self, ty: &str, key: &'a str) -> Result<String, ParseError> {
        match self.raw(key) {
            None => Err(self.err(format!("{ty} record without {key}="))),
            Some("") => Err(self.err(format!("{ty} record with an empty {key}="))),
            Some(v) => Ok(v.to_string()),
        }
    }

    fn num<T: std::str::FromStr>(
        &mut self,
        ty: &str,
        key: &'a str,
        what: &str,
    ) -> Result<T, ParseError> {
        let v = self.string(ty, key)?;
        v.parse::<T>()
            .map_err(|_| self.err(format!("{key}={v}: not {what}")))
    }

    fn u32(&mut self, ty: &str, key: &'a str) -> Result<u32, ParseError> {
        self.num(ty, key, "a whole number ≥ 0")
    }

    fn i64(&mut self, ty: &str, key: &'a str) -> Result<i64, ParseError> {
        self.num(ty, key, "a whole number")
    }

    fn f64(&mut self, ty: &str, key: &'a str) -> Result<f64, ParseError> {
        let v: f64 = self.num(ty, key, "a number")?;
        if !v.is_finite() {
            return Err(self.err(format!("{key}: not a finite number")));
        }
        Ok(v)
    }

    /// Absent or empty: None.
    fn opt_f64(&mut self, key: &'a str) -> Result<Option<f64>, ParseError> {
        match self.raw(key) {
            None | Some("") => Ok(None),
            Some(v) => match v.parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(Some(x)),
                _ => Err(self.err(format!("{key}={v}: not a number"))),
            },
        }
    }

    fn opt_u64(&mut self, key: &'a str) -> Result<Option<u64>, ParseError> {
        match self.raw(key) {
            None | Some("") => Ok(None),
            Some(v) => v
                .parse::<u64>()
                .map(Some)
                .map_err(|_| self.err(format!("{key}={v}: not a whole number ≥ 0"))),
        }
    }

    fn extra(&self) -> Vec<(String, String)> {
        self.pairs
            .iter()
            .filter(|(k, _)| !self.used.contains(k))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

/// Parses one line: `Ok(None)` for a blank or comment line.
pub fn parse_line(text: &str, loc: &Loc) -> Result<Option<Record>, ParseError> {
    let text = text.trim();
    if text.is_empty() || text.starts_with('#') {
        return Ok(None);
    }
    let err = |msg: String| ParseError {
        loc: loc.clone(),
        msg,
    };
    let mut tokens = text.split_whitespace();
    let ty = tokens.next().unwrap_or_default();
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    for tok in tokens {
        let Some((k, v)) = tok.split_once('=') else {
            return Err(err(format!("token '{tok}' is not key=value")));
        };
        if k.is_empty() {
            return Err(err(format!("token '{tok}' has an empty key")));
        }
        if pairs.iter().any(|(pk, _)| *pk == k) {
            return Err(err(format!("key {k} given twice")));
        }
        pairs.push((k, v));
    }
    let mut f = Fields {
        loc,
        pairs,
        used: BTreeSet::new(),
    };
    let rec = match ty {
        "meta" => Record::Meta(Meta {
            loc: loc.clone(),
            pairs: f
                .pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }),
        "job" => {
            let j = Job {
                loc: loc.clone(),
                policy: f.string(ty, "policy")?,
                workload: f.string(ty, "workload")?,
                mpl: f.u32(ty, "mpl")?,
                rep: f.u32(ty, "rep")?,
                idx: f.u32(ty, "idx")?,
                submit_ms: f.f64(ty, "submit_ms")?,
                end_ms: f.f64(ty, "end_ms")?,
                rc: f.i64(ty, "rc")?,
                ranks: f.u32(ty, "ranks")?,
                ranks_ok: f.u32(ty, "ranks_ok")?,
                elapsed_s: f.opt_f64("elapsed_s")?,
                extra: Vec::new(),
            };
            if j.mpl == 0 {
                return Err(err("mpl=0: a cell has at least one job".into()));
            }
            if j.end_ms < j.submit_ms {
                return Err(err(format!(
                    "end_ms={} is before submit_ms={}",
                    j.end_ms, j.submit_ms
                )));
            }
            if j.elapsed_s.is_some_and(|e| e < 0.0) {
                return Err(err("elapsed_s is negative".into()));
            }
            Record::Job(Job {
                extra: f.extra(),
                ..j
            })
        }
        "cell" => {
            let c = Cell {
                loc: loc.clone(),
                policy: f.string(ty, "policy")?,
                workload: f.string(ty, "workload")?,
                mpl: f.u32(ty, "mpl")?,
                rep: f.u32(ty, "rep")?,
                switches: f.opt_u64("switches")?,
                extra: Vec::new(),
            };
            if c.mpl == 0 {
                return Err(err("mpl=0: a cell has at least one job".into()));
            }
            Record::Cell(Cell {
                extra: f.extra(),
                ..c
            })
        }
        "short" => {
            let s = Short {
                loc: loc.clone(),
                policy: f.string(ty, "policy")?,
                rep: f.u32(ty, "rep")?,
                workload: f.string(ty, "workload")?,
                behind: f.u32(ty, "behind")?,
                long_workload: f.string(ty, "long_workload")?,
                first_long_submit_ms: f.f64(ty, "first_long_submit_ms")?,
                submit_ms: f.f64(ty, "submit_ms")?,
                end_ms: f.f64(ty, "end_ms")?,
                rc: f.i64(ty, "rc")?,
                ranks: f.u32(ty, "ranks")?,
                ranks_ok: f.u32(ty, "ranks_ok")?,
                extra: Vec::new(),
            };
            if s.end_ms < s.submit_ms {
                return Err(err(format!(
                    "end_ms={} is before submit_ms={}",
                    s.end_ms, s.submit_ms
                )));
            }
            Record::Short(Short {
                extra: f.extra(),
                ..s
            })
        }
        other => {
            return Err(err(format!(
                "unknown record type '{other}' (expected meta, job, cell or short)"
            )))
        }
    };
    Ok(Some(rec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const JOB: &str = "job policy=eevdf workload=ep mpl=2 rep=0 idx=1 submit_ms=1000 end_ms=3500 rc=0 ranks=4 ranks_ok=4 elapsed_s=2.4";

    fn parse(text: &str) -> Result<Log, ParseError> {
        let mut log = Log::default();
        log.add_str("run.log", text)?;
        Ok(log)
    }

    fn err_of(text: &str) -> ParseError {
        parse(text).expect_err("should be rejected")
    }

    #[test]
    fn a_job_record_parses_with_every_field() {
        let log = parse(&format!("{JOB} host=node1\n")).unwrap();
        assert_eq!(log.jobs.len(), 1);
        let j = &log.jobs[0];
        assert_eq!((j.policy.as_str(), j.workload.as_str()), ("eevdf", "ep"));
        assert_eq!(
            (j.mpl, j.rep, j.idx, j.rc, j.ranks, j.ranks_ok),
            (2, 0, 1, 0, 4, 4)
        );
        assert_eq!(j.time_s(), 2.5);
        assert_eq!(j.elapsed_s, Some(2.4));
        assert!(j.ok());
        assert_eq!(j.extra, vec![("host".to_string(), "node1".to_string())]);
        assert_eq!(j.loc.to_string(), "run.log:1");
    }

    #[test]
    fn blank_and_comment_lines_are_ignored_and_lines_are_counted() {
        let log = parse(&format!(
            "# header\n\n   \n  # indented comment\r\n{JOB}\r\n"
        ))
        .unwrap();
        assert_eq!(log.jobs.len(), 1);
        assert_eq!(log.jobs[0].loc.line, 5);
    }

    #[test]
    fn elapsed_may_be_absent_or_empty() {
        let no = JOB.replace(" elapsed_s=2.4", "");
        assert_eq!(parse(&no).unwrap().jobs[0].elapsed_s, None);
        let empty = JOB.replace("elapsed_s=2.4", "elapsed_s=");
        assert_eq!(parse(&empty).unwrap().jobs[0].elapsed_s, None);
    }

    #[test]
    fn ok_needs_rc_zero_ranks_and_every_rank_ok() {
        let ok = |rc: &str, ranks: &str, ranks_ok: &str| {
            let t = JOB.replace("rc=0", &format!("rc={rc}")).replace(
                "ranks=4 ranks_ok=4",
                &format!("ranks={ranks} ranks_ok={ranks_ok}"),
            );
            parse(&t).unwrap().jobs[0].ok()
        };
        assert!(ok("0", "4", "4"));
        assert!(!ok("1", "4", "4"));
        assert!(!ok("-9", "4", "4"));
        assert!(!ok("0", "4", "3"));
        assert!(!ok("0", "0", "0"));
    }

    #[test]
    fn cell_short_and_meta_records_parse() {
        let log = parse(
            "meta nodes=2 vcpus=1 kernel=6.12.1+deb\n\
             cell policy=gang-strict workload=ep mpl=3 rep=1 switches=42\n\
             cell policy=eevdf workload=ep mpl=3 rep=1\n\
             cell policy=eevdf workload=ep mpl=2 rep=1 switches=\n\
             short policy=eevdf rep=0 workload=rt behind=2 long_workload=ep first_long_submit_ms=100 submit_ms=600 end_ms=2600 rc=0 ranks=2 ranks_ok=2\n",
        )
        .unwrap();
        assert_eq!(log.meta[0].pairs.len(), 3);
        assert_eq!(log.cells[0].switches, Some(42));
        assert_eq!(log.cells[1].switches, None);
        assert_eq!(log.cells[2].switches, None);
        let s = &log.shorts[0];
        assert_eq!(
            (s.behind, s.long_workload.as_str(), s.response_s()),
            (2, "ep", 2.0)
        );
        assert_eq!(log.policies, vec!["gang-strict", "eevdf"]);
    }

    #[test]
    fn policies_and_workloads_keep_first_seen_order_across_files() {
        let mut log = Log::default();
        log.add_str("a", &JOB.replace("eevdf", "signal")).unwrap();
        log.add_str(
            "b",
            &format!(
                "{JOB}\n{}",
                JOB.replace("eevdf", "signal").replace("=ep", "=rt")
            ),
        )
        .unwrap();
        assert_eq!(log.policies, vec!["signal", "eevdf"]);
        assert_eq!(log.workloads, vec!["ep", "rt"]);
    }

    #[test]
    fn meta_merges_over_files_and_keeps_differing_values() {
        let mut log = Log::default();
        log.add_str("a", "meta nodes=2 kernel=x").unwrap();
        log.add_str("b", "meta nodes=2 kernel=y").unwrap();
        let m = log.merged_meta();
        assert_eq!(m[0].0, "nodes");
        assert_eq!(
            m[0].1,
            vec![("2".to_string(), vec!["a".to_string(), "b".to_string()])]
        );
        assert_eq!(m[1].1.len(), 2);
        assert_eq!(m[1].1[1], ("y".to_string(), vec!["b".to_string()]));
    }

    /// Every malformed case, each reported as `file:line: reason`.
    #[test]
    fn every_error_names_file_and_line() {
        let cases: &[(&str, &str)] = &[
            ("jobb policy=x", "unknown record type 'jobb'"),
            ("job policy=eevdf workload", "token 'workload' is not key=value"),
            ("cell =3 policy=x", "empty key"),
            ("meta a=1 a=2", "key a given twice"),
            (&JOB.replace("policy=eevdf ", ""), "job record without policy="),
            (&JOB.replace("policy=eevdf", "policy="), "empty policy="),
            (&JOB.replace("mpl=2", "mpl=two"), "mpl=two: not a whole number"),
            (&JOB.replace("mpl=2", "mpl=-1"), "mpl=-1: not a whole number"),
            (&JOB.replace("mpl=2", "mpl=0"), "mpl=0"),
            (&JOB.replace("rc=0", "rc=x"), "rc=x: not a whole number"),
            (&JOB.replace("submit_ms=1000", "submit_ms=1e3x"), "submit_ms=1e3x: not a number"),
            (&JOB.replace("submit_ms=1000", "submit_ms=inf"), "not a finite number"),
            (&JOB.replace("end_ms=3500", "end_ms=500"), "before submit_ms"),
            (&JOB.replace("elapsed_s=2.4", "elapsed_s=fast"), "elapsed_s=fast: not a number"),
            (&JOB.replace("elapsed_s=2.4", "elapsed_s=-1"), "negative"),
            ("cell policy=a workload=b mpl=1 rep=0 switches=-3", "switches=-3"),
            ("cell policy=a workload=b mpl=1", "cell record without rep="),
            ("short policy=a rep=0 workload=rt behind=2 first_long_submit_ms=0 submit_ms=1 end_ms=2 rc=0 ranks=1 ranks_ok=1", "short record without long_workload="),
            ("short policy=a rep=0 workload=rt behind=2 long_workload=ep first_long_submit_ms=0 submit_ms=5 end_ms=2 rc=0 ranks=1 ranks_ok=1", "before submit_ms"),
        ];
        for (line, want) in cases {
            let text = format!("# first line\n{line}\n");
            let e = err_of(&text);
            assert_eq!(
                e.loc,
                Loc {
                    file: "run.log".into(),
                    line: 2
                },
                "{line}"
            );
            let shown = e.to_string();
            assert!(shown.starts_with("run.log:2: "), "{shown}");
            assert!(shown.contains(want), "{line}: got '{shown}', want '{want}'");
        }
    }

    #[test]
    fn bad_utf8_names_its_line() {
        let mut log = Log::default();
        let e = log.add_bytes("f", b"# ok\nmeta a=\xff\n").unwrap_err();
        assert_eq!(e.to_string(), "f:2: not UTF-8 text");
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let e = Log::load(&["/nonexistent/gang-eval/x.log"]).unwrap_err();
        assert!(e.to_string().starts_with("/nonexistent/gang-eval/x.log: "));
    }

    proptest! {
        /// Arbitrary text never panics; an error always names the line.
        #[test]
        fn random_lines_never_panic(lines in proptest::collection::vec(".{0,80}", 1..6)) {
            let text = lines.join("\n");
            let mut log = Log::default();
            if let Err(e) = log.add_str("p.log", &text) {
                prop_assert!(e.loc.line >= 1 && e.loc.line <= text.split('\n').count());
                prop_assert!(e.to_string().starts_with("p.log:"));
            }
        }

        /// Lines that look like records (right type words and keys, random
        /// values) never panic either.
        #[test]
        fn record_like_lines_never_panic(
            ty in prop::sample::select(vec!["job", "cell", "short", "meta", "x"]),
            toks in proptest::collection::vec(
                (prop::sample::select(vec!["policy", "workload", "mpl", "rep", "idx", "submit_ms",
                    "end_ms", "rc", "ranks", "ranks_ok", "elapsed_s", "switches", "behind",
                    "long_workload", "first_long_submit_ms", "", "k"]),
                 "[-0-9a-z.=eE+]{0,8}"), 0..16),
        ) {
            let line = std::iter::once(ty.to_string())
                .chain(toks.iter().map(|(k, v)| format!("{k}={v}")))
                .collect::<Vec<_>>()
                .join(" ");
            let _ = parse_line(&line, &Loc { file: "p".into(), line: 1 });
        }
    }
}
