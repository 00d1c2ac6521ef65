#![no_main]
// The target's body is `warmstart::fuzz::ring_page` (src/fuzz.rs), which the unit tests also run.
libfuzzer_sys::fuzz_target!(|data: &[u8]| warmstart::fuzz::ring_page(data));
