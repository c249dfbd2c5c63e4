//! The raw bindings (build.rs: bindgen on Debian's pmix_server.h).
#![allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    clippy::all
)]
include!(concat!(env!("OUT_DIR"), "/pmix.rs"));
