//! Building and reading `pmix_info_t` arrays.
//!
//! [`InfoList`] wraps libpmix's own list builder (`PMIx_Info_list_*`):
//! every `add` deep-copies the value into the list (strings are strdup'ed,
//! data arrays copied), so nothing borrowed from Rust has to outlive the
//! call. [`InfoList::finish`] converts it into an [`InfoArray`], an owned
//! `pmix_data_array_t` freed by `PMIx_Data_array_destruct` on drop; an
//! `InfoArray` can be added to another list as a nested array (the
//! per-proc and per-node arrays of a job registration).
//!
//! Reading goes the other way: [`value_of`] turns the few value types we
//! accept from clients (publish) into a [`Value`], and [`flag`] reads a
//! boolean directive such as PMIX_COLLECT_DATA. Everything read from a
//! client is bounded by the caller; nothing here trusts a length beyond
//! the array it was handed.
//!
//! Known faults: a failed `add` (libpmix out of memory, a key longer than
//! PMIX_MAX_KEYLEN) is reported by `finish`, not at the `add` that failed.
use std::ffi::{c_char, c_void, CStr, CString};

use crate::ffi;
use crate::Error;

/// Keys are the bindings' NUL-terminated byte strings (`ffi::PMIX_JOB_SIZE`).
pub(crate) type Key = &'static [u8];

fn key_ptr(key: Key) -> *const c_char {
    assert_eq!(key.last(), Some(&0), "a PMIx key constant ends with NUL");
    key.as_ptr().cast()
}

/// A value a client can publish and look up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Str(String),
    Bytes(Vec<u8>),
    Int(i64),
    Uint(u64),
}

impl Value {
    /// Bytes held for it (the store's accounting).
    pub fn len(&self) -> usize {
        match self {
            Value::Str(s) => s.len(),
            Value::Bytes(b) => b.len(),
            Value::Int(_) | Value::Uint(_) => 8,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub(crate) struct InfoList {
    list: *mut c_void,
    failed: Option<(String, i32)>,
}

impl InfoList {
    pub fn new() -> InfoList {
        // SAFETY: no arguments; returns a new list or NULL.
        let list = unsafe { ffi::PMIx_Info_list_start() };
        InfoList { list, failed: None }
    }

    fn add_raw(&mut self, key: Key, value: *const c_void, ty: u32) {
        if self.list.is_null() || self.failed.is_some() {
            return;
        }
        // SAFETY: the list is live, key is NUL-terminated, value points to
        // data of type `ty` that libpmix copies before returning.
        let rc = unsafe { ffi::PMIx_Info_list_add(self.list, key_ptr(key), value, ty as u16) };
        if rc != ffi::PMIX_SUCCESS as i32 {
            let k = String::from_utf8_lossy(&key[..key.len() - 1]).into_owned();
            self.failed = Some((k, rc));
        }
    }

    pub fn u32(&mut self, key: Key, v: u32) -> &mut Self {
        self.add_raw(key, (&v as *const u32).cast(), ffi::PMIX_UINT32);
        self
    }

    pub fn u16(&mut self, key: Key, v: u16) -> &mut Self {
        self.add_raw(key, (&v as *const u16).cast(), ffi::PMIX_UINT16);
        self
    }

    pub fn rank(&mut self, key: Key, v: u32) -> &mut Self {
        self.add_raw(key, (&v as *const u32).cast(), ffi::PMIX_PROC_RANK);
        self
    }

    pub fn bool(&mut self, key: Key, v: bool) -> &mut Self {
        self.add_raw(key, (&v as *const bool).cast(), ffi::PMIX_BOOL);
        self
    }

    /// A string; one with a NUL inside is refused by `finish`.
    pub fn str(&mut self, key: Key, v: &str) -> &mut Self {
        match CString::new(v) {
            Ok(c) => self.add_raw(key, c.as_ptr().cast(), ffi::PMIX_STRING),
            Err(_) => {
                let k = String::from_utf8_lossy(&key[..key.len() - 1]).into_owned();
                self.failed = Some((k, ffi::PMIX_ERR_BAD_PARAM));
            }
        }
        self
    }

    /// A regex made by `PMIx_generate_regex`/`_ppn` (copied by libpmix's
    /// regex component, which knows its length).
    pub fn regex(&mut self, key: Key, v: *const c_char) -> &mut Self {
        self.add_raw(key, v.cast(), ffi::PMIX_REGEX);
        self
    }

    /// A nested array (copied).
    pub fn array(&mut self, key: Key, v: &InfoArray) -> &mut Self {
        self.add_raw(
            key,
            (&v.0 as *const ffi::pmix_data_array_t).cast(),
            ffi::PMIX_DATA_ARRAY,
        );
        self
    }

    pub fn finish(mut self) -> Result<InfoArray, Error> {
        if self.list.is_null() {
            return Err(Error::new(ffi::PMIX_ERR_NOMEM, "PMIx_Info_list_start"));
        }
        if let Some((key, rc)) = self.failed.take() {
            return Err(Error::new(rc, &format!("adding {key} to an info list")));
        }
        let mut array = InfoArray(ffi::pmix_data_array_t::default());
        // SAFETY: the list is live; `array` receives a copy it then owns.
        let rc = unsafe { ffi::PMIx_Info_list_convert(self.list, &mut array.0) };
        if rc != ffi::PMIX_SUCCESS as i32 {
            return Err(Error::new(rc, "PMIx_Info_list_convert"));
        }
        Ok(array)
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        if !self.list.is_null() {
            // SAFETY: made by PMIx_Info_list_start, released once.
            unsafe { ffi::PMIx_Info_list_release(self.list) };
        }
    }
}

/// An owned `pmix_data_array_t` of `pmix_info_t`.
pub(crate) struct InfoArray(ffi::pmix_data_array_t);

impl InfoArray {
    pub fn as_mut_ptr(&mut self) -> *mut ffi::pmix_info_t {
        self.0.array.cast()
    }

    pub fn len(&self) -> usize {
        self.0.size
    }
}

impl Drop for InfoArray {
    fn drop(&mut self) {
        // SAFETY: filled by PMIx_Info_list_convert (or default: empty).
        unsafe { ffi::PMIx_Data_array_destruct(&mut self.0) };
    }
}

/// The info array libpmix handed an upcall, as a slice.
///
/// # Safety
/// `info` must point to `n` valid entries (or be NULL with any `n`).
pub(crate) unsafe fn infos<'a>(info: *const ffi::pmix_info_t, n: usize) -> &'a [ffi::pmix_info_t] {
    if info.is_null() || n == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(info, n) }
    }
}

/// An info's key as text.
pub(crate) fn key_of(info: &ffi::pmix_info_t) -> String {
    // SAFETY: pmix_key_t is a NUL-terminated char array.
    unsafe { CStr::from_ptr(info.key.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Whether `key` is among `info` set to true (a missing key is `default`).
pub(crate) fn flag(info: &[ffi::pmix_info_t], key: Key, default: bool) -> bool {
    let want = &key[..key.len() - 1];
    for i in info {
        // SAFETY: as key_of.
        let k = unsafe { CStr::from_ptr(i.key.as_ptr()) };
        if k.to_bytes() == want {
            if i.value.type_ == ffi::PMIX_BOOL as u16 {
                // SAFETY: the type says which union member is set.
                return unsafe { i.value.data.flag };
            }
            // PMIx's convention: a directive given without a bool is true.
            return true;
        }
    }
    default
}

/// A client's value, if it is of a type we keep; `max` bounds its size.
pub(crate) fn value_of(v: &ffi::pmix_value_t, max: usize) -> Result<Value, i32> {
    // SAFETY: each arm reads the union member the type says is set; the
    // byte object's length is libpmix's, bounded below before copying.
    unsafe {
        match u32::from(v.type_) {
            ffi::PMIX_STRING => {
                if v.data.string.is_null() {
                    return Err(ffi::PMIX_ERR_BAD_PARAM);
                }
                let s = CStr::from_ptr(v.data.string);
                if s.to_bytes().len() > max {
                    return Err(ffi::PMIX_ERR_OUT_OF_RESOURCE);
                }
                Ok(Value::Str(s.to_string_lossy().into_owned()))
            }
            ffi::PMIX_BYTE_OBJECT => {
                let bo = v.data.bo;
                if bo.size > max {
                    return Err(ffi::PMIX_ERR_OUT_OF_RESOURCE);
                }
                if bo.size == 0 || bo.bytes.is_null() {
                    return Ok(Value::Bytes(Vec::new()));
                }
                Ok(Value::Bytes(
                    std::slice::from_raw_parts(bo.bytes.cast::<u8>(), bo.size).to_vec(),
                ))
            }
            ffi::PMIX_INT => Ok(Value::Int(v.data.integer.into())),
            ffi::PMIX_INT32 => Ok(Value::Int(v.data.int32.into())),
            ffi::PMIX_INT64 => Ok(Value::Int(v.data.int64)),
            ffi::PMIX_UINT => Ok(Value::Uint(v.data.uint.into())),
            ffi::PMIX_UINT32 => Ok(Value::Uint(v.data.uint32.into())),
            ffi::PMIX_UINT64 => Ok(Value::Uint(v.data.uint64)),
            ffi::PMIX_SIZE => Ok(Value::Uint(v.data.size as u64)),
            _ => Err(ffi::PMIX_ERR_NOT_SUPPORTED),
        }
    }
}

/// Points `out` at `v`'s data, borrowed: `v` must outlive every use of
/// `out`, and `out` must never be destructed by libpmix.
pub(crate) fn borrow_value(v: &Value, out: &mut ffi::pmix_value_t, cstr: &Option<CString>) {
    match v {
        Value::Str(_) => {
            out.type_ = ffi::PMIX_STRING as u16;
            out.data.string = cstr
                .as_ref()
                .map_or(std::ptr::null_mut(), |c| c.as_ptr().cast_mut());
        }
        Value::Bytes(b) => {
            out.type_ = ffi::PMIX_BYTE_OBJECT as u16;
            out.data.bo = ffi::pmix_byte_object_t {
                bytes: b.as_ptr().cast::<c_char>().cast_mut(),
                size: b.len(),
            };
        }
        Value::Int(i) => {
            out.type_ = ffi::PMIX_INT64 as u16;
            out.data.int64 = *i;
        }
        Value::Uint(u) => {
            out.type_ = ffi::PMIX_UINT64 as u16;
            out.data.uint64 = *u;
        }
    }
}
