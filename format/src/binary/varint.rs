//! Varints: unsigned LEB128, in the shortest form, at most ten bytes (the module's layout).

use super::{BinaryError, VARINT_SIZE_BYTES_MAX};

/// Decodes the varint at `*pos`, of any length, and moves `pos` past the bytes it read. Errors
/// name the offset of the varint's first byte.
pub(crate) fn read(input: &[u8], pos: &mut usize) -> Result<u64, BinaryError> {
    let offset_bytes = *pos as u64;
    let mut value = 0u64;
    for byte_idx in 0..VARINT_SIZE_BYTES_MAX {
        let Some(&byte) = input.get(*pos) else {
            return Err(BinaryError::Truncated { offset_bytes });
        };
        *pos += 1;
        value |= u64::from(byte & 0x7f) << (7 * byte_idx);
        if byte < 0x80 {
            if byte == 0 && byte_idx > 0 {
                return Err(BinaryError::VarintNotMinimal { offset_bytes });
            }
            // The tenth byte carries bit 63 only.
            if byte_idx == VARINT_SIZE_BYTES_MAX - 1 && byte > 1 {
                return Err(BinaryError::VarintOverflow { offset_bytes });
            }
            return Ok(value);
        }
    }
    Err(BinaryError::VarintTooLong { offset_bytes })
}

/// Writes `value` into `buf`; returns how many bytes it took.
#[inline]
pub(super) fn encode_varint(mut value: u64, buf: &mut [u8; VARINT_SIZE_BYTES_MAX]) -> usize {
    let mut size_bytes = 0;
    while value >= 0x80 {
        buf[size_bytes] = (value as u8) | 0x80;
        value >>= 7;
        size_bytes += 1;
    }
    buf[size_bytes] = value as u8;
    size_bytes + 1
}

#[inline]
pub(crate) fn write_varint(out: &mut Vec<u8>, value: u64) {
    if value < 0x80 {
        out.push(value as u8);
        return;
    }
    let mut buf = [0u8; VARINT_SIZE_BYTES_MAX];
    let size_bytes = encode_varint(value, &mut buf);
    out.extend_from_slice(&buf[..size_bytes]);
}
