// Bindings to Debian's libpmix (OpenPMIx 4.2, package libpmix-dev), made
// at build time by bindgen from the installed headers, with an allowlist
// of only what src/ffi.rs's users call. pkg-config (`pmix.pc`) says where
// Debian puts them: headers in /usr/lib/x86_64-linux-gnu/pmix2/include,
// the library in .../pmix2/lib (not on the default search path, hence the
// rpath pkg-config adds and we pass on).
//
// Why not the pmix-sys crate (0.1.1, from the Lamellar runtime): it needs
// PMIX_LIB_DIR/PMIX_INCLUDE_DIR set by hand (no pkg-config), binds all of
// pmix.h with another bindgen (0.72, a second copy in the lock), and its
// licence is a custom file, where ours is GPL-2.0-only. The allowlist here
// is ~40 names and one header.
//
// Known faults: bindgen needs libclang; on Debian 12 with llvm-19 it is in
// /usr/lib/llvm-19/lib, which we point LIBCLANG_PATH at when unset.
use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-env-changed=LIBCLANG_PATH");
    let lib = match pkg_config::Config::new()
        .atleast_version("4.1")
        .probe("pmix")
    {
        Ok(lib) => lib,
        Err(e) => panic!(
            "gang-pmix needs the PMIx headers and library: install libpmix-dev \
             (scripts/setup.sh does). pkg-config said: {e}"
        ),
    };
    for dir in &lib.link_paths {
        // Debian's libpmix is off the default search path.
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    }
    if env::var_os("LIBCLANG_PATH").is_none() {
        for dir in [
            "/usr/lib/llvm-19/lib",
            "/usr/lib/llvm-18/lib",
            "/usr/lib/llvm-16/lib",
        ] {
            if PathBuf::from(dir).exists() {
                // SAFETY: a build script is single-threaded.
                unsafe { env::set_var("LIBCLANG_PATH", dir) };
                break;
            }
        }
    }
    let mut b = bindgen::Builder::default()
        .header("wrapper.h")
        .allowlist_function("PMIx_server_(init|finalize|register_nspace|deregister_nspace|register_client|deregister_client|setup_fork)")
        .allowlist_function("PMIx_generate_(regex|ppn)")
        .allowlist_function("PMIx_(Info_list_start|Info_list_add|Info_list_convert|Info_list_release|Data_array_destruct|Error_string|Value_load)")
        .allowlist_type("pmix_server_module_t")
        .allowlist_type("pmix_(info|value|proc|pdata|data_array|byte_object)_t")
        .allowlist_var("PMIX_(SUCCESS|ERROR|ERR_[A-Z_]+|OPERATION_SUCCEEDED)")
        .allowlist_var("PMIX_(BOOL|STRING|UINT32|UINT64|UINT|INT|INT32|INT64|PROC_RANK|BYTE_OBJECT|DATA_ARRAY|INFO|UINT16|SIZE|PROC|REGEX)")
        .allowlist_var("PMIX_(MAX_KEYLEN|MAX_NSLEN|RANK_[A-Z]+)")
        .allowlist_var("PMIX_(SERVER_TMPDIR|SYSTEM_TMPDIR|SERVER_TOOL_SUPPORT|SERVER_SYSTEM_SUPPORT|SERVER_SESSION_SUPPORT|SERVER_GATEWAY|SERVER_SCHEDULER|SERVER_REMOTE_CONNECTIONS)")
        .allowlist_var("PMIX_(UNIV_SIZE|JOB_SIZE|JOBID|APPNUM|APP_SIZE|APPLDR|NUM_NODES|NODE_MAP|PROC_MAP|LOCAL_SIZE|LOCAL_PEERS|LOCAL_RANK|NODE_RANK|RANK|HOSTNAME|NODEID|LOCALLDR|MAX_PROCS|SPAWNED|PROC_DATA|JOB_NUM_APPS|TMPDIR|NSDIR|PROCDIR|GLOBAL_RANK|APP_RANK|LOCAL_CPUSETS|COLLECT_DATA|NODE_SIZE|NODE_INFO|NODE_LIST|LOCAL_SIZE|MAPBY|RANKBY|BINDTO|PROC_INFO_ARRAY|JOB_INFO_ARRAY|APP_INFO_ARRAY|APP_INFO|PROC_INFO|REGEX|JOB_INFO|NODE_MAP_RAW|PROC_MAP_RAW|HOSTNAME_KEEP_FQDN|PROC_PID|PROC_STATE_STATUS)")
        .derive_default(true)
        .layout_tests(false)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for inc in &lib.include_paths {
        b = b.clang_arg(format!("-I{}", inc.display()));
    }
    let bindings = b.generate().unwrap_or_else(|e| {
        panic!("bindgen on pmix_server.h failed ({e}): is libpmix-dev installed (scripts/setup.sh) and libclang found (LIBCLANG_PATH)?")
    });
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    bindings
        .write_to_file(out.join("pmix.rs"))
        .expect("writing the PMIx bindings");
}
