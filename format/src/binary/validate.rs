//! The layout check: one value walked without building it, with every check the decoder makes.

use super::de::Reader;
use super::{
    BinaryError, DEPTH_MAX, TAG_ARRAY, TAG_BYTES, TAG_FALSE, TAG_FLOAT, TAG_NEGATIVE_INT, TAG_NULL,
    TAG_OBJECT, TAG_STRING, TAG_TRUE, TAG_UINT,
};

/// Walks one value without building it, making every check the decoder makes. The walk is a
/// loop over an explicit stack bounded by [`DEPTH_MAX`], so hostile nesting cannot overflow
/// the call stack; `depth` is the nesting the value already sits in.
pub(super) fn skip_value(reader: &mut Reader<'_>, depth: u32) -> Result<(), BinaryError> {
    assert!(depth <= DEPTH_MAX);
    // The open containers, innermost last: the items each has left, and whether its items
    // are object members (a key, then a value).
    let mut n_remaining = [0u64; DEPTH_MAX as usize];
    let mut keyed = [false; DEPTH_MAX as usize];
    let mut n_open = 0usize;
    loop {
        let offset_bytes = reader.offset();
        match reader.read_tag()? {
            TAG_NULL | TAG_FALSE | TAG_TRUE => {}
            TAG_UINT => {
                reader.read_varint()?;
            }
            TAG_NEGATIVE_INT => {
                reader.read_negative()?;
            }
            TAG_FLOAT => {
                reader.read_float()?;
            }
            TAG_STRING => reader.skip_str()?,
            TAG_BYTES => {
                reader.read_bytes()?;
            }
            tag @ (TAG_ARRAY | TAG_OBJECT) => {
                let n_items = reader.read_count()?;
                if depth + n_open as u32 >= DEPTH_MAX {
                    return Err(BinaryError::TooDeep {
                        offset_bytes,
                        depth_max: DEPTH_MAX,
                    });
                }
                n_remaining[n_open] = n_items;
                keyed[n_open] = tag == TAG_OBJECT;
                n_open += 1;
            }
            tag => return Err(BinaryError::UnknownTag { offset_bytes, tag }),
        }
        // Move to the next value: close finished containers, read a member's key.
        loop {
            let Some(top) = n_open.checked_sub(1) else {
                return Ok(());
            };
            if n_remaining[top] == 0 {
                n_open = top;
                continue;
            }
            n_remaining[top] -= 1;
            if keyed[top] {
                reader.skip_str()?;
            }
            break;
        }
    }
}
