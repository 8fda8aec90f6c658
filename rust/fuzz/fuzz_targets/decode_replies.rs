#![no_main]
//! Arbitrary bytes, split arbitrarily: the reply parser must agree with itself and never panic.
//! Run: `cd rust/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run decode_replies`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    lmcache_resp_core::fuzzing::decode_in_chunks(data);
});
