//! Errors: the C status and the library's message, read right after the failing call.
use crate::sys;
use std::ffi::CStr;
use std::fmt;

/// A failed ptdp call: its status (`sys::PTDP_ERR_*`) and the library's message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    status: sys::ptdp_status,
    message: String,
}

/// The result of every fallible call.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error raised on the Rust side (e.g. a string with a NUL byte), with a C status.
    pub fn new(status: sys::ptdp_status, message: impl Into<String>) -> Self {
        Error {
            status,
            message: message.into(),
        }
    }

    /// The C status, one of `sys::PTDP_ERR_*`.
    pub fn status(&self) -> sys::ptdp_status {
        self.status
    }

    /// The library's message: what was wrong and where.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The status in words, e.g. "invalid argument".
    pub fn status_string(&self) -> String {
        // SAFETY: ptdp_status_string() returns a static string for any value.
        unsafe { CStr::from_ptr(sys::ptdp_status_string(self.status)) }
            .to_string_lossy()
            .into_owned()
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::new(sys::PTDP_ERR_INVALID_ARGUMENT, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status_string(), self.message)
    }
}

impl std::error::Error for Error {}

/// Turns a status into a Result, taking the thread's last message on failure.
pub(crate) fn check(status: sys::ptdp_status) -> Result<()> {
    if status == sys::PTDP_SUCCESS {
        return Ok(());
    }
    // SAFETY: ptdp_last_error() returns the calling thread's message, never NULL.
    let message = unsafe { CStr::from_ptr(sys::ptdp_last_error()) }
        .to_string_lossy()
        .into_owned();
    Err(Error { status, message })
}

/// A Rust string as a C string; a NUL byte inside is an invalid argument.
pub(crate) fn c_string(what: &str, s: &str) -> Result<std::ffi::CString> {
    std::ffi::CString::new(s).map_err(|_| Error::invalid(format!("{what} contains a NUL byte")))
}

/// Reads a NUL-terminated string out of a byte buffer the library filled.
pub(crate) fn from_buffer(buffer: &[u8]) -> String {
    let end = buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end]).into_owned()
}

/// The bytes a call writes into a char buffer under the count/capacity protocol (the length is
/// reported also when the buffer is too small), the buffer grown until they fit. `call(buffer,
/// capacity, length)` returns the status; a failure that is not about room is an error.
pub(crate) fn filled(
    initial: usize,
    mut call: impl FnMut(*mut std::os::raw::c_char, usize, &mut usize) -> sys::ptdp_status,
) -> Result<Vec<u8>> {
    let mut size = initial.max(1);
    loop {
        let mut buffer = vec![0u8; size];
        let mut length = 0;
        let status = call(buffer.as_mut_ptr().cast(), buffer.len(), &mut length);
        if status == sys::PTDP_SUCCESS {
            buffer.truncate(length);
            return Ok(buffer);
        }
        if length < size {
            check(status)?; // not a matter of room
        }
        size = length + 1;
    }
}
