//! The C ABI from C: builds examples/c/pingpong.c with `cc` against the
//! cdylib cargo built for these tests and runs it (no scheduler:
//! GANG_CLOCK=off) under each GANG_WAIT policy, plus a malformed one.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where cargo built libgangrt.so for this test run: target/<profile>/deps
/// (next to this test binary; the copy in target/<profile>/ is not always
/// refreshed by `cargo test`), else target/<profile>/.
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    if deps.join("libgangrt.so").exists() {
        deps.to_path_buf()
    } else {
        deps.parent().unwrap().to_path_buf()
    }
}

fn have_cc() -> bool {
    Command::new("cc")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn build() -> Option<PathBuf> {
    if !have_cc() {
        eprintln!("SKIPPED: no `cc` on this host, the C example is not built");
        return None;
    }
    let lib = lib_dir();
    assert!(
        lib.join("libgangrt.so").exists(),
        "no libgangrt.so in {}",
        lib.display()
    );
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pingpong");
    let st = Command::new("cc")
        .args([
            "-std=c11",
            "-D_GNU_SOURCE",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O2",
            "-I",
        ])
        .arg(root.join("include"))
        .arg(root.join("examples/c/pingpong.c"))
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lgangrt", "-o"])
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success(), "cc failed");
    Some(out)
}

fn run(bin: &Path, wait: &str) -> std::process::Output {
    Command::new(bin)
        .arg("3000")
        // cargo's LD_LIBRARY_PATH would win over the rpath and may hold a
        // stale copy of the library (target/<profile>/libgangrt.so).
        .env_remove("LD_LIBRARY_PATH")
        .env("GANG_CLOCK", "off")
        .env("GANG_WAIT", wait)
        .output()
        .unwrap()
}

#[test]
fn pingpong_in_c() {
    let Some(bin) = build() else { return };
    for wait in ["block", "spin", "spin:20", "adaptive", "inslot:50"] {
        let o = run(&bin, wait);
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success(),
            "GANG_WAIT={wait}: {:?}\n{stdout}\n{stderr}",
            o.status
        );
        assert!(stdout.contains("3000 ping-pongs ok"), "{stdout}");
        // No clock: unknown slot, generation 0, never a yield.
        assert!(
            stdout.contains("slot remaining -1 ns, generation 0"),
            "{stdout}"
        );
        assert!(stdout.contains(" 0 yields"), "{stdout}");
        assert!(stdout.contains("3000 waits"), "{stdout}");
        assert!(stderr.is_empty(), "GANG_WAIT={wait}: {stderr}");
    }
    // A malformed GANG_WAIT: one warning per process, then block.
    let o = run(&bin, "fast");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    let warnings = stderr
        .matches("gangrt: warning: GANG_WAIT=\"fast\"")
        .count();
    assert_eq!(warnings, 2, "one per process (ping and pong): {stderr}");
}
