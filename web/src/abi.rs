//! The C ABI the page's glue (`web/servesim.js`) calls.
//!
//! The glue `alloc`s a buffer, writes the request's UTF-8 into it, calls a
//! function with `(ptr, len)` and `dealloc`s the buffer. Each function
//! returns 0 (the answer is the output) or 1 (the output is the error text,
//! what the binary prints after `error: `); `output_ptr` / `output_len`
//! give the output, valid until the next call.

use std::cell::RefCell;

thread_local! {
    static OUTPUT: RefCell<String> = const { RefCell::new(String::new()) };
    static TIMESERIES: RefCell<String> = const { RefCell::new(String::new()) };
    static CAVEAT_NOTES: RefCell<String> = const { RefCell::new(String::new()) };
}

#[no_mangle]
pub extern "C" fn alloc(len: usize) -> *mut u8 {
    let mut v = Vec::<u8>::with_capacity(len.max(1));
    let p = v.as_mut_ptr();
    std::mem::forget(v);
    p
}

/// # Safety
/// `ptr` and `len` must come from one `alloc` call.
#[no_mangle]
pub unsafe extern "C" fn dealloc(ptr: *mut u8, len: usize) {
    drop(Vec::from_raw_parts(ptr, 0, len.max(1)));
}

#[no_mangle]
pub extern "C" fn output_ptr() -> *const u8 {
    OUTPUT.with(|o| o.borrow().as_ptr())
}

#[no_mangle]
pub extern "C" fn output_len() -> usize {
    OUTPUT.with(|o| o.borrow().len())
}

fn answer(r: Result<String, String>) -> u32 {
    let (code, text) = match r {
        Ok(t) => (0, t),
        Err(e) => (1, e),
    };
    OUTPUT.with(|o| *o.borrow_mut() = text);
    code
}

/// # Safety
/// `ptr` must point to `len` readable bytes.
unsafe fn request<'a>(ptr: *const u8, len: usize) -> Result<&'a str, String> {
    let bytes = if len == 0 { &[][..] } else { std::slice::from_raw_parts(ptr, len) };
    std::str::from_utf8(bytes).map_err(|e| format!("request: not UTF-8: {e}"))
}

macro_rules! export {
    ($($name:ident => $f:expr),* $(,)?) => {$(
        /// # Safety
        /// `ptr` must point to `len` readable bytes.
        #[no_mangle]
        pub unsafe extern "C" fn $name(ptr: *const u8, len: usize) -> u32 {
            answer(request(ptr, len).and_then($f))
        }
    )*};
}

export! {
    resolve => crate::resolve,
    simulate => |r: &str| {
        let s = crate::simulate_all(r)?;
        TIMESERIES.with(|t| *t.borrow_mut() = s.timeseries);
        CAVEAT_NOTES.with(|t| *t.borrow_mut() = s.caveat_notes);
        Ok(s.report)
    },
    sweep => crate::sweep,
    explain => crate::explain,
    translate => crate::translate,
    alignment => crate::alignment,
}

/// The shipped scenarios (see [`crate::scenarios`]).
#[no_mangle]
pub extern "C" fn scenarios() -> u32 {
    answer(Ok(crate::scenarios()))
}

/// The knobs both engines have (see [`crate::knobs`]).
#[no_mangle]
pub extern "C" fn knobs() -> u32 {
    answer(Ok(crate::knobs()))
}

/// The sentences under the caveats of the last `simulate` call's report (see
/// [`crate::Simulated::caveat_notes`]).
#[no_mangle]
pub extern "C" fn last_caveat_notes() -> u32 {
    answer(Ok(CAVEAT_NOTES.with(|t| t.borrow().clone())))
}

/// The time series of the last `simulate` call that asked for one.
#[no_mangle]
pub extern "C" fn last_timeseries() -> u32 {
    answer(Ok(TIMESERIES.with(|t| t.borrow().clone())))
}
