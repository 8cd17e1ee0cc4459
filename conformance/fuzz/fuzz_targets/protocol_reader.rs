//! Fuzzes the protocol reader: any line gives a reply, a handshake or a clear error.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    let _ = fire_conformance::protocol::parse_hello(&line);
    let _ = fire_conformance::protocol::parse_result(&line);
    let _ = fire_conformance::protocol::parse_reply(&line, "fire/x/y");
    let _ = fire_conformance::implementations::external::Recorded::parse(&line);
});
