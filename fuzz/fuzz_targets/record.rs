//! Fuzz target: the store's record decoder. The crc is fixed up so that the header and body
//! decoders are reached, and the raw bytes are also checked as they are.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sessionlog_format::record::{check_record, check_record_crc, decode_checked_body};

fuzz_target!(|bytes: &[u8]| {
    let _ = check_record(bytes, &[0; 32]);
    let mut fixed = bytes.to_vec();
    if fixed.len() >= 4 {
        let crc = crc32fast::hash(&fixed[4..]);
        fixed[..4].copy_from_slice(&crc.to_le_bytes());
    }
    if let Ok(header) = check_record_crc(&fixed) {
        let _ = decode_checked_body(&fixed, &header, 0);
    }
});
