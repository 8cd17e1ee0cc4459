//! Fuzzes the vector-file and manifest parsers: any bytes give a value or a clear error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = fire_conformance::vectors::load::parse_file("fire/fuzz.yaml", text);
        let _ = fire_conformance::vectors::load::parse_manifest(text);
    }
});
