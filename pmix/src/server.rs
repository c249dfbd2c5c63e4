//! The PMIx server: [`Server::start`] calls PMIx_server_init with our
//! module (the `extern "C"` upcalls below), jobs are registered and
//! deregistered, and [`Server::fork_env`] gives a rank's environment.
//!
//! libpmix is a process singleton: one server per process, so the host
//! and the per-namespace bounds live in one global [`STATE`], set by
//! `start` and cleared by `Drop` (after PMIx_server_finalize, when no
//! upcall can come any more). A second `start` while one runs is an
//! error.
//!
//! Upcalls run on libpmix's progress thread. Each converts its C arguments
//! into Rust values (copies: libpmix owns what it passes), checks the
//! bounds, calls the [`Host`] and answers synchronously
//! (PMIX_OPERATION_SUCCEEDED: libpmix then calls no callback), except the
//! fence, which the host completes later through [`FenceDone`].
//! Registration calls are asynchronous in libpmix; we wait for their
//! callback on a channel, so they must not be called from a `Host` method
//! (the progress thread would wait for itself).
//!
//! libpmix keeps keys in its `hash` store (PMIX_MCA_gds=hash, set here):
//! its shared-memory stores crash the process on a client's 20 MiB commit.
//!
//! Known faults: libpmix runs in this process, so its crashes are ours;
//! after refusing a client of the wrong user libpmix 4.2.2 serves nothing
//! more (registrations time out: tests/wrong_user.rs). Direct modex (a Get
//! of a key no fence collected) is not supported: clients must fence with
//! data collection (Open MPI's default); no spawn, connect, group, event or
//! tool support. docs/pmix.md has the details.
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use log::{debug, warn};

use crate::ffi;
use crate::host::{Error, FenceDone, Host, Proc, MAX_KEY_BYTES, MAX_VALUE_BYTES};
use crate::info::{self, borrow_value, infos, InfoList, Value};
use crate::job::{checked, registration, text};
use gang_wire::pmix::{max_fence_bytes, PmixJob};

/// PMIX_RANK_WILDCARD.
const RANK_WILDCARD: u32 = u32::MAX - 1;
/// libpmix's MCA parameter choosing its data store.
const GDS_VAR: &str = "PMIX_MCA_gds";
/// How long a registration may take before we give up on libpmix.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long deregistration is waited for. libpmix 4.2 sometimes never
/// calls back (after a client of the namespace was refused for its uid):
/// the namespace is then forgotten by us, and left to libpmix.
const DEREGISTER_TIMEOUT: Duration = Duration::from_secs(2);

struct State {
    host: Arc<dyn Host>,
    /// Local ranks of each registered namespace (the fence bound).
    jobs: BTreeMap<String, usize>,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn state() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

fn host() -> Option<Arc<dyn Host>> {
    state().as_ref().map(|s| s.host.clone())
}

/// The running PMIx server (one per process). Dropping it finalizes
/// libpmix.
/// libpmix's server calls are thread-safe (they shift into its progress
/// thread), so a `Server` can be shared.
pub struct Server {
    _private: (),
}

impl Server {
    /// PMIx_server_init, with its rendezvous files under `tmpdir` (which
    /// the ranks' user must be able to reach), on the node named by
    /// gethostname(). Sets PMIX_MCA_gds=hash in the process environment
    /// if it is unset (see below): start the server before other threads
    /// read the environment, or set the variable beforehand.
    pub fn start(tmpdir: &Path, host: Arc<dyn Host>) -> Result<Server, Error> {
        Server::start_as(tmpdir, None, host)
    }

    /// As [`Server::start`], the node calling itself `hostname` (the name
    /// it has in the `nodes` of every [`PmixJob`]; clients get it as
    /// PMIX_HOSTNAME).
    pub fn start_as(
        tmpdir: &Path,
        hostname: Option<&str>,
        host: Arc<dyn Host>,
    ) -> Result<Server, Error> {
        let mut st = state();
        if st.is_some() {
            return Err(Error::new(
                ffi::PMIX_ERR_INIT,
                "a PMIx server already runs in this process (libpmix is a singleton)",
            ));
        }
        let dir = tmpdir
            .to_str()
            .ok_or_else(|| Error::new(ffi::PMIX_ERR_BAD_PARAM, "tmpdir is not UTF-8"))?;
        let mut l = InfoList::new();
        l.str(ffi::PMIX_SERVER_TMPDIR, dir)
            .str(ffi::PMIX_SYSTEM_TMPDIR, dir)
            .bool(ffi::PMIX_SERVER_TOOL_SUPPORT, false)
            .bool(ffi::PMIX_SERVER_SYSTEM_SUPPORT, false);
        if let Some(h) = hostname {
            l.str(ffi::PMIX_HOSTNAME, h);
        }
        let mut info = l.finish()?;
        // The shared-memory stores (ds21, ds12) crash the server on a
        // client's 20 MiB commit (tests/clients.rs): every key goes to the
        // server's hash store, and clients ask the server for what they
        // Get. libpmix 4.2 takes this only as an MCA parameter (the
        // PMIX_GDS_MODULE attribute is ignored), read from the environment
        // during PMIx_server_init.
        if std::env::var_os(GDS_VAR).is_none() {
            std::env::set_var(GDS_VAR, "hash");
        }
        let mut module = module();
        // SAFETY: module and info are valid for the call; libpmix copies
        // the module's function pointers and the info.
        let rc = unsafe { ffi::PMIx_server_init(&mut module, info.as_mut_ptr(), info.len()) };
        if rc != ffi::PMIX_SUCCESS as i32 {
            return Err(Error::new(rc, "PMIx_server_init"));
        }
        *st = Some(State {
            host,
            jobs: BTreeMap::new(),
        });
        Ok(Server { _private: () })
    }

    /// Registers `spec`'s namespace and this node's ranks of it.
    pub fn register_job(&self, spec: &PmixJob) -> Result<(), Error> {
        let layout = checked(spec)?;
        let mut info = registration(spec, &layout)?;
        let ns = nspace(&spec.nspace)?;
        let local = spec.local_ranks();
        // SAFETY: ns and info live for the call (libpmix copies them);
        // the callback is op_done with a token from `Waiter`.
        wait_op(
            "PMIx_server_register_nspace",
            REGISTER_TIMEOUT,
            |cb, token| unsafe {
                ffi::PMIx_server_register_nspace(
                    ns.as_ptr(),
                    local.len() as c_int,
                    info.as_mut_ptr(),
                    info.len(),
                    cb,
                    token,
                )
            },
        )?;
        if let Some(s) = state().as_mut() {
            s.jobs.insert(spec.nspace.clone(), local.len());
        }
        for &rank in local {
            let p = proc_t(&spec.nspace, rank)?;
            // SAFETY: as above; no server object.
            let r = wait_op(
                "PMIx_server_register_client",
                REGISTER_TIMEOUT,
                |cb, token| unsafe {
                    ffi::PMIx_server_register_client(
                        &p,
                        spec.uid,
                        spec.gid,
                        std::ptr::null_mut(),
                        cb,
                        token,
                    )
                },
            );
            if let Err(e) = r {
                self.deregister_job(&spec.nspace);
                return Err(e);
            }
        }
        debug!(
            "PMIx: namespace {} registered with local ranks {local:?}",
            spec.nspace
        );
        Ok(())
    }

    /// Forgets a namespace (its clients, its data).
    pub fn deregister_job(&self, nspace_name: &str) {
        let Ok(ns) = nspace(nspace_name) else { return };
        // SAFETY: ns lives for the call.
        let r = wait_op(
            "PMIx_server_deregister_nspace",
            DEREGISTER_TIMEOUT,
            |cb, token| unsafe {
                ffi::PMIx_server_deregister_nspace(ns.as_ptr(), cb, token);
                ffi::PMIX_SUCCESS as i32
            },
        );
        if let Err(e) = r {
            warn!("PMIx: {e}");
        }
        if let Some(s) = state().as_mut() {
            s.jobs.remove(nspace_name);
        }
    }

    /// The environment of `rank` of `nspace` (PMIx_server_setup_fork):
    /// PMIX_NAMESPACE, PMIX_RANK, PMIX_SERVER_URI*, PMIX_SECURITY_MODE...
    /// Add them to the rank's environment before exec.
    pub fn fork_env(&self, nspace_name: &str, rank: u32) -> Result<Vec<(String, String)>, Error> {
        let p = proc_t(nspace_name, rank)?;
        let mut env: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: env starts as an empty argv that libpmix extends.
        let rc = unsafe { ffi::PMIx_server_setup_fork(&p, &mut env) };
        let vars = take_argv(env);
        if rc != ffi::PMIX_SUCCESS as i32 {
            return Err(Error::new(rc, "PMIx_server_setup_fork"));
        }
        Ok(vars
            .into_iter()
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
            })
            .collect())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: the server was initialized by start.
        let rc = unsafe { ffi::PMIx_server_finalize() };
        if rc != ffi::PMIX_SUCCESS as i32 {
            warn!("PMIx_server_finalize: {}", crate::status_name(rc));
        }
        *state() = None;
    }
}

/// Frees an argv made by libpmix, returning its strings.
fn take_argv(env: *mut *mut c_char) -> Vec<String> {
    let mut out = Vec::new();
    if env.is_null() {
        return out;
    }
    // SAFETY: a NULL-terminated array of malloc'ed strings, freed once.
    unsafe {
        let mut i = 0;
        while !(*env.add(i)).is_null() {
            out.push(text(*env.add(i)));
            libc::free((*env.add(i)).cast());
            i += 1;
        }
        libc::free(env.cast());
    }
    out
}

fn nspace(name: &str) -> Result<CString, Error> {
    if name.len() > gang_wire::pmix::MAX_NSPACE_BYTES {
        return Err(Error::new(ffi::PMIX_ERR_BAD_PARAM, "namespace too long"));
    }
    CString::new(name).map_err(|_| Error::new(ffi::PMIX_ERR_BAD_PARAM, "namespace with NUL"))
}

fn proc_t(name: &str, rank: u32) -> Result<ffi::pmix_proc_t, Error> {
    let ns = nspace(name)?;
    let mut p = ffi::pmix_proc_t {
        rank,
        ..Default::default()
    };
    for (d, s) in p.nspace.iter_mut().zip(ns.as_bytes()) {
        *d = *s as c_char;
    }
    Ok(p)
}

fn proc_of(p: &ffi::pmix_proc_t) -> Proc {
    Proc {
        nspace: text(p.nspace.as_ptr()),
        rank: (p.rank < RANK_WILDCARD).then_some(p.rank),
    }
}

/// Runs an asynchronous libpmix call and waits for its op callback, at
/// most `limit` (a late callback finds no one listening and just frees
/// its token).
fn wait_op(
    what: &str,
    limit: Duration,
    call: impl FnOnce(ffi::pmix_op_cbfunc_t, *mut c_void) -> ffi::pmix_status_t,
) -> Result<(), Error> {
    let (tx, rx) = mpsc::channel::<i32>();
    let token = Box::into_raw(Box::new(tx)).cast::<c_void>();
    let rc = call(Some(op_done), token);
    if rc == ffi::PMIX_OPERATION_SUCCEEDED || rc != ffi::PMIX_SUCCESS as i32 {
        // No callback will come: take the token back.
        // SAFETY: made above, not handed to a callback.
        drop(unsafe { Box::from_raw(token.cast::<mpsc::Sender<i32>>()) });
        return if rc == ffi::PMIX_OPERATION_SUCCEEDED {
            Ok(())
        } else {
            Err(Error::new(rc, what))
        };
    }
    match rx.recv_timeout(limit) {
        Ok(0) => Ok(()),
        Ok(rc) => Err(Error::new(rc, what)),
        Err(_) => Err(Error::new(ffi::PMIX_ERR_TIMEOUT, what)),
    }
}

unsafe extern "C" fn op_done(status: ffi::pmix_status_t, cbdata: *mut c_void) {
    // SAFETY: the token of wait_op, called back once.
    let tx = unsafe { Box::from_raw(cbdata.cast::<mpsc::Sender<i32>>()) };
    let _ = tx.send(status);
}

fn module() -> ffi::pmix_server_module_t {
    ffi::pmix_server_module_t {
        client_connected: Some(client_connected),
        client_finalized: Some(client_finalized),
        abort: Some(abort),
        fence_nb: Some(fence_nb),
        publish: Some(publish),
        lookup: Some(lookup),
        unpublish: Some(unpublish),
        ..Default::default()
    }
}

const DONE: ffi::pmix_status_t = ffi::PMIX_OPERATION_SUCCEEDED;

unsafe extern "C" fn client_connected(
    p: *const ffi::pmix_proc_t,
    _server_object: *mut c_void,
    _cb: ffi::pmix_op_cbfunc_t,
    _cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    if let (Some(h), Some(p)) = (host(), unsafe { p.as_ref() }) {
        h.client_connected(&proc_of(p));
    }
    DONE
}

unsafe extern "C" fn client_finalized(
    p: *const ffi::pmix_proc_t,
    _server_object: *mut c_void,
    _cb: ffi::pmix_op_cbfunc_t,
    _cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    if let (Some(h), Some(p)) = (host(), unsafe { p.as_ref() }) {
        h.client_finalized(&proc_of(p));
    }
    DONE
}

unsafe extern "C" fn abort(
    p: *const ffi::pmix_proc_t,
    _server_object: *mut c_void,
    status: c_int,
    msg: *const c_char,
    procs: *mut ffi::pmix_proc_t,
    nprocs: usize,
    _cb: ffi::pmix_op_cbfunc_t,
    _cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    let (Some(h), Some(p)) = (host(), unsafe { p.as_ref() }) else {
        return ffi::PMIX_ERR_INIT;
    };
    let me = proc_of(p);
    let targets: Vec<Proc> = unsafe { procs_of(procs, nprocs) };
    let msg: String = text(msg).chars().take(4096).collect();
    h.abort(
        &me.nspace,
        me.rank.unwrap_or(RANK_WILDCARD),
        status,
        &msg,
        &targets,
    );
    DONE
}

/// # Safety
/// `procs` points to `n` procs, or is NULL.
unsafe fn procs_of(procs: *const ffi::pmix_proc_t, n: usize) -> Vec<Proc> {
    if procs.is_null() {
        return Vec::new();
    }
    unsafe { std::slice::from_raw_parts(procs, n) }
        .iter()
        .map(proc_of)
        .collect()
}

unsafe extern "C" fn fence_nb(
    procs: *const ffi::pmix_proc_t,
    nprocs: usize,
    info: *const ffi::pmix_info_t,
    ninfo: usize,
    data: *mut c_char,
    ndata: usize,
    cbfunc: ffi::pmix_modex_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    let procs = unsafe { procs_of(procs, nprocs) };
    let collect = info::flag(unsafe { infos(info, ninfo) }, ffi::PMIX_COLLECT_DATA, false);
    let Some(first) = procs.first() else {
        return ffi::PMIX_ERR_BAD_PARAM;
    };
    let (h, local) = {
        let st = state();
        let Some(s) = st.as_ref() else {
            return ffi::PMIX_ERR_INIT;
        };
        (
            s.host.clone(),
            s.jobs.get(&first.nspace).copied().unwrap_or(1),
        )
    };
    if ndata > max_fence_bytes(local) {
        warn!(
            "PMIx: fence of {} with {ndata} bytes from {local} local ranks: refused",
            first.nspace
        );
        return ffi::PMIX_ERR_OUT_OF_RESOURCE;
    }
    let blob = if data.is_null() || ndata == 0 {
        Vec::new()
    } else {
        // SAFETY: libpmix's buffer of ndata bytes, valid during the call.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), ndata) }.to_vec()
    };
    let nspace = first.nspace.clone();
    h.fence(&nspace, &procs, blob, collect, FenceDone { cbfunc, cbdata });
    ffi::PMIX_SUCCESS as i32
}

unsafe extern "C" fn publish(
    p: *const ffi::pmix_proc_t,
    info: *const ffi::pmix_info_t,
    ninfo: usize,
    _cb: ffi::pmix_op_cbfunc_t,
    _cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    let (Some(h), Some(p)) = (host(), unsafe { p.as_ref() }) else {
        return ffi::PMIX_ERR_INIT;
    };
    let mut pairs = Vec::new();
    for i in unsafe { infos(info, ninfo) } {
        let key = info::key_of(i);
        if key.starts_with("pmix.") {
            continue; // a directive (range, persistence, timeout...)
        }
        match info::value_of(&i.value, MAX_VALUE_BYTES) {
            Ok(v) => pairs.push((key, v)),
            Err(rc) => return rc,
        }
    }
    match h.publish(&proc_of(p), pairs) {
        Ok(()) => DONE,
        Err(e) => e.status,
    }
}

/// The keys libpmix passes: a NULL-terminated argv.
///
/// # Safety
/// `keys` is such an argv, or NULL.
unsafe fn keys_of(keys: *mut *mut c_char) -> Vec<String> {
    let mut out = Vec::new();
    if keys.is_null() {
        return out;
    }
    let mut i = 0;
    while !unsafe { *keys.add(i) }.is_null() && i < 1024 {
        out.push(
            text(unsafe { *keys.add(i) })
                .chars()
                .take(MAX_KEY_BYTES)
                .collect(),
        );
        i += 1;
    }
    out
}

unsafe extern "C" fn lookup(
    p: *const ffi::pmix_proc_t,
    keys: *mut *mut c_char,
    _info: *const ffi::pmix_info_t,
    _ninfo: usize,
    cbfunc: ffi::pmix_lookup_cbfunc_t,
    cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    let (Some(h), Some(p), Some(cb)) = (host(), unsafe { p.as_ref() }, cbfunc) else {
        return ffi::PMIX_ERR_INIT;
    };
    let keys = unsafe { keys_of(keys) };
    let found = match h.lookup(&proc_of(p), &keys) {
        Ok(found) => found,
        Err(e) => return e.status,
    };
    // Borrowed into pmix_pdata_t for the duration of the callback, which
    // copies what it keeps.
    let strings: Vec<Option<CString>> = found
        .iter()
        .map(|(_, _, v)| match v {
            Value::Str(s) => CString::new(s.as_str()).ok(),
            _ => None,
        })
        .collect();
    let mut pdata: Vec<ffi::pmix_pdata_t> = Vec::with_capacity(found.len());
    for ((owner, key, v), s) in found.iter().zip(&strings) {
        let mut d = ffi::pmix_pdata_t::default();
        if let Ok(pp) = proc_t(&owner.nspace, owner.rank.unwrap_or(RANK_WILDCARD)) {
            d.proc_ = pp;
        }
        for (dst, src) in d
            .key
            .iter_mut()
            .zip(key.as_bytes().iter().take(MAX_KEY_BYTES))
        {
            *dst = *src as c_char;
        }
        borrow_value(v, &mut d.value, s);
        pdata.push(d);
    }
    // SAFETY: pdata and what it points to live until the callback returns.
    unsafe {
        cb(
            ffi::PMIX_SUCCESS as i32,
            pdata.as_mut_ptr(),
            pdata.len(),
            cbdata,
        )
    };
    ffi::PMIX_SUCCESS as i32
}

unsafe extern "C" fn unpublish(
    p: *const ffi::pmix_proc_t,
    keys: *mut *mut c_char,
    _info: *const ffi::pmix_info_t,
    _ninfo: usize,
    _cb: ffi::pmix_op_cbfunc_t,
    _cbdata: *mut c_void,
) -> ffi::pmix_status_t {
    let (Some(h), Some(p)) = (host(), unsafe { p.as_ref() }) else {
        return ffi::PMIX_ERR_INIT;
    };
    match h.unpublish(&proc_of(p), &unsafe { keys_of(keys) }) {
        Ok(()) => DONE,
        Err(e) => e.status,
    }
}
