//! What the node agent provides to the PMIx server: the [`Host`] trait,
//! whose methods libpmix's upcalls reach, [`FenceDone`] (a fence's
//! completion, callable later from any thread), and [`Store`], the
//! in-process publish/lookup directory used by default.
//!
//! Every `Host` method is called on libpmix's progress thread: it must
//! not block (no waiting on gangd, no lock held across I/O). A fence is
//! asynchronous: `Host::fence` hands the node's blob on (to gangd) and
//! returns; whoever has every node's blob calls `FenceDone::complete`
//! with their concatenation, in node order. Dropping a `FenceDone`
//! without completing it fails the fence (the clients get an error
//! rather than hang).
//!
//! Bounds (clients are user processes): a fence's local blob is at most
//! [`MAX_FENCE_BYTES_PER_RANK`] per local rank of the namespace (checked in
//! server.rs before the host sees it); the store keeps values of at most
//! [`MAX_VALUE_BYTES`], keys of at most PMIX_MAX_KEYLEN and
//! [`MAX_STORE_BYTES`] in all. Over a bound the client gets an error
//! status.
//!
//! Known faults: the store is per process (ranges other than
//! "everything this agent serves" are not kept apart) and lookups do not
//! wait for a key to appear (PMIX_WAIT is ignored: not found is final).
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use crate::ffi;
use crate::info::Value;

/// What one rank may contribute to a fence (in gang_wire: the agent
/// bounds what it holds of a fence with the same number).
pub use gang_wire::pmix::MAX_FENCE_BYTES_PER_RANK;
/// One published value.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// Everything published, together.
pub const MAX_STORE_BYTES: usize = 16 << 20;
/// A key (PMIX_MAX_KEYLEN).
pub const MAX_KEY_BYTES: usize = 511;

/// A PMIx status (negative) and what failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub status: i32,
    pub what: String,
}

impl Error {
    pub fn new(status: i32, what: &str) -> Error {
        Error {
            status,
            what: what.to_string(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({})",
            self.what,
            status_name(self.status),
            self.status
        )
    }
}

impl std::error::Error for Error {}

/// libpmix's name of a status.
pub fn status_name(status: i32) -> String {
    // SAFETY: returns a static string for any status.
    let s = unsafe { ffi::PMIx_Error_string(status) };
    if s.is_null() {
        return "UNKNOWN".into();
    }
    // SAFETY: NUL-terminated static text.
    unsafe { std::ffi::CStr::from_ptr(s) }
        .to_string_lossy()
        .into_owned()
}

/// One process, or every process of a namespace (`rank: None`, PMIx's
/// wildcard).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Proc {
    pub nspace: String,
    pub rank: Option<u32>,
}

/// The node agent's side of the server. Called from libpmix's progress
/// thread: never block.
pub trait Host: Send + Sync {
    /// A registered client finished PMIx_Init.
    fn client_connected(&self, _proc: &Proc) {}
    /// A client called PMIx_Finalize.
    fn client_finalized(&self, _proc: &Proc) {}
    /// A client called PMIx_Abort (MPI_Abort): end the job with `status`.
    /// `targets` are the processes to abort (empty: the caller's whole
    /// namespace).
    fn abort(&self, nspace: &str, rank: u32, status: i32, msg: &str, targets: &[Proc]);
    /// Every local participant of a fence over `procs` arrived; `local_data`
    /// is this node's blob. Complete `done` with every node's blob
    /// concatenated (this node's included), from any thread.
    fn fence(
        &self,
        nspace: &str,
        procs: &[Proc],
        local_data: Vec<u8>,
        collect: bool,
        done: FenceDone,
    );
    /// PMIx_Publish: `pairs` from `from`.
    fn publish(&self, from: &Proc, pairs: Vec<(String, Value)>) -> Result<(), Error> {
        default_store().publish(from, pairs)
    }
    /// PMIx_Lookup: what was published under `keys` (each found key with
    /// its publisher); `Err` with PMIX_ERR_NOT_FOUND if none is.
    fn lookup(&self, from: &Proc, keys: &[String]) -> Result<Vec<(Proc, String, Value)>, Error> {
        default_store().lookup(from, keys)
    }
    /// PMIx_Unpublish of `keys` (all of `from`'s if empty).
    fn unpublish(&self, from: &Proc, keys: &[String]) -> Result<(), Error> {
        default_store().unpublish(from, keys)
    }
}

/// libpmix's completion of one fence.
pub struct FenceDone {
    pub(crate) cbfunc: ffi::pmix_modex_cbfunc_t,
    pub(crate) cbdata: *mut std::ffi::c_void,
}

// SAFETY: libpmix's modex callback may be called from any thread (it
// thread-shifts into its progress thread); cbdata is an opaque token.
unsafe impl Send for FenceDone {}

impl FenceDone {
    /// Releases the clients of the fence: with every node's data, or an
    /// error (its status is what the clients' PMIx_Fence returns).
    pub fn complete(mut self, result: Result<Vec<u8>, Error>) {
        self.finish(result);
    }

    fn finish(&mut self, result: Result<Vec<u8>, Error>) {
        let Some(cb) = self.cbfunc.take() else { return };
        match result {
            Ok(data) => {
                let data = Box::new(data);
                let (ptr, len) = (data.as_ptr().cast::<std::ffi::c_char>(), data.len());
                let keep = Box::into_raw(data).cast::<std::ffi::c_void>();
                // SAFETY: libpmix copies or keeps `ptr` until it calls
                // release_blob(keep), which frees the box once.
                unsafe {
                    cb(
                        ffi::PMIX_SUCCESS as i32,
                        ptr,
                        len,
                        self.cbdata,
                        Some(release_blob),
                        keep,
                    )
                };
            }
            Err(e) => {
                let status = if e.status < 0 {
                    e.status
                } else {
                    ffi::PMIX_ERROR
                };
                // SAFETY: no data, nothing to release.
                unsafe {
                    cb(
                        status,
                        std::ptr::null(),
                        0,
                        self.cbdata,
                        None,
                        std::ptr::null_mut(),
                    )
                };
            }
        }
    }
}

impl Drop for FenceDone {
    fn drop(&mut self) {
        self.finish(Err(Error::new(
            ffi::PMIX_ERROR,
            "fence dropped by the host",
        )));
    }
}

unsafe extern "C" fn release_blob(cbdata: *mut std::ffi::c_void) {
    // SAFETY: made by Box::into_raw in FenceDone::finish, released once.
    drop(unsafe { Box::from_raw(cbdata.cast::<Vec<u8>>()) });
}

/// Published keys of every namespace this process serves.
#[derive(Default)]
pub struct Store {
    inner: Mutex<StoreInner>,
}

#[derive(Default)]
struct StoreInner {
    entries: BTreeMap<String, (Proc, Value)>,
    bytes: usize,
}

fn default_store() -> &'static Store {
    static STORE: std::sync::OnceLock<Store> = std::sync::OnceLock::new();
    STORE.get_or_init(Store::default)
}

impl Store {
    /// All of `pairs`, or none: a duplicate key, an oversized key or
    /// value, or a full store refuses the whole publish.
    pub fn publish(&self, from: &Proc, pairs: Vec<(String, Value)>) -> Result<(), Error> {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut add = 0usize;
        for (i, (k, v)) in pairs.iter().enumerate() {
            if k.is_empty() || k.len() > MAX_KEY_BYTES || v.len() > MAX_VALUE_BYTES {
                return Err(Error::new(
                    ffi::PMIX_ERR_BAD_PARAM,
                    &format!("publishing {k:.64}"),
                ));
            }
            if s.entries.contains_key(k) || pairs[..i].iter().any(|(k2, _)| k2 == k) {
                return Err(Error::new(
                    ffi::PMIX_ERR_DUPLICATE_KEY,
                    &format!("publishing {k}"),
                ));
            }
            add += k.len() + v.len();
        }
        if s.bytes + add > MAX_STORE_BYTES {
            return Err(Error::new(
                ffi::PMIX_ERR_OUT_OF_RESOURCE,
                "publishing: the store is full",
            ));
        }
        s.bytes += add;
        for (k, v) in pairs {
            s.entries.insert(k, (from.clone(), v));
        }
        Ok(())
    }

    pub fn lookup(
        &self,
        _from: &Proc,
        keys: &[String],
    ) -> Result<Vec<(Proc, String, Value)>, Error> {
        let s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let found: Vec<_> = keys
            .iter()
            .filter_map(|k| {
                s.entries
                    .get(k)
                    .map(|(p, v)| (p.clone(), k.clone(), v.clone()))
            })
            .collect();
        if found.is_empty() {
            return Err(Error::new(ffi::PMIX_ERR_NOT_FOUND, "lookup"));
        }
        Ok(found)
    }

    /// Only the publisher's own keys go.
    pub fn unpublish(&self, from: &Proc, keys: &[String]) -> Result<(), Error> {
        let mut s = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<String> = s
            .entries
            .iter()
            .filter(|(k, (p, _))| p.nspace == from.nspace && (keys.is_empty() || keys.contains(k)))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            if let Some((_, v)) = s.entries.remove(&k) {
                s.bytes -= k.len() + v.len();
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(ns: &str, r: u32) -> Proc {
        Proc {
            nspace: ns.into(),
            rank: Some(r),
        }
    }

    fn s(v: &str) -> Value {
        Value::Str(v.into())
    }

    #[test]
    fn a_published_key_is_found_with_its_publisher() {
        let st = Store::default();
        st.publish(&p("a", 0), vec![("svc".into(), s("port-1"))])
            .unwrap();
        let got = st
            .lookup(&p("b", 3), &["svc".into(), "other".into()])
            .unwrap();
        assert_eq!(got, vec![(p("a", 0), "svc".to_string(), s("port-1"))]);
        assert_eq!(
            st.lookup(&p("a", 0), &["other".into()]).unwrap_err().status,
            ffi::PMIX_ERR_NOT_FOUND
        );
    }

    #[test]
    fn a_key_is_published_once_and_a_duplicate_publish_changes_nothing() {
        let st = Store::default();
        st.publish(&p("a", 0), vec![("k".into(), s("1"))]).unwrap();
        let e = st
            .publish(&p("a", 1), vec![("j".into(), s("2")), ("k".into(), s("3"))])
            .unwrap_err();
        assert_eq!(e.status, ffi::PMIX_ERR_DUPLICATE_KEY);
        assert!(
            st.lookup(&p("a", 0), &["j".into()]).is_err(),
            "all or nothing"
        );
        let e = st
            .publish(&p("a", 1), vec![("x".into(), s("2")), ("x".into(), s("3"))])
            .unwrap_err();
        assert_eq!(e.status, ffi::PMIX_ERR_DUPLICATE_KEY);
    }

    #[test]
    fn oversized_keys_values_and_a_full_store_are_refused() {
        let st = Store::default();
        let big = Value::Bytes(vec![0; MAX_VALUE_BYTES + 1]);
        assert_eq!(
            st.publish(&p("a", 0), vec![("k".into(), big)])
                .unwrap_err()
                .status,
            ffi::PMIX_ERR_BAD_PARAM
        );
        let long = "k".repeat(MAX_KEY_BYTES + 1);
        assert!(st.publish(&p("a", 0), vec![(long, s("v"))]).is_err());
        let mb = || Value::Bytes(vec![0; MAX_VALUE_BYTES]);
        let mut n = 0;
        let e = loop {
            match st.publish(&p("a", 0), vec![(format!("k{n}"), mb())]) {
                Ok(()) => n += 1,
                Err(e) => break e,
            }
            assert!(
                n <= MAX_STORE_BYTES / MAX_VALUE_BYTES,
                "the store never filled"
            );
        };
        assert_eq!(e.status, ffi::PMIX_ERR_OUT_OF_RESOURCE);
        // Unpublishing makes room again.
        st.unpublish(&p("a", 5), &["k0".into()]).unwrap();
        st.publish(&p("a", 0), vec![("again".into(), mb())])
            .unwrap();
    }

    #[test]
    fn unpublish_takes_only_the_namespaces_own_keys() {
        let st = Store::default();
        st.publish(&p("a", 0), vec![("ka".into(), s("1"))]).unwrap();
        st.publish(&p("b", 0), vec![("kb".into(), s("2"))]).unwrap();
        st.unpublish(&p("a", 1), &[]).unwrap();
        st.unpublish(&p("a", 1), &["kb".into()]).unwrap();
        assert!(st.lookup(&p("c", 0), &["ka".into()]).is_err());
        assert!(st.lookup(&p("c", 0), &["kb".into()]).is_ok());
    }
}
