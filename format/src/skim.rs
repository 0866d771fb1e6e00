//! Skimming: decoding an event to check it, not to keep it.
//!
//! `check`, the checking pass of an import and `verify` decode every event only to run the
//! rules over it and drop it. The bulk of a log is the packed runs of its embedded streams (spec 6.2:
//! the `texts`/`args` pieces and the `dt` gaps of `text-chunks`, `reasoning-chunks` and
//! `tool-call-chunks` records), which no rule reads: only the chunk records (`block-start`,
//! `block-end`, `usage`, `finish`) are. While a thread skims, those values are decoded by the
//! same visitors as always, so every member, type, string and integer is checked and every
//! refusal reads byte for byte as in a full decode, but what they hold is not kept: a
//! skimmed run decodes to no pieces and no gaps. A skimmed event is for the rules only; it
//! is never encoded, stored or shown (the tests compare skimmed and whole decodes and reads
//! event for event, packed runs aside, and fault for fault).
//!
//! The mode is a property of the thread for the length of one call ([`skimming`]), because
//! the packed runs sit several serde layers down (`Vec<StreamRecord>` inside a payload
//! inside a row) where no seed reaches.
//!
//! A V3 or V4 row of text goes one step further: its runs are checked by one plain pass over
//! the row and stripped before serde_json sees them (`crate::strip`); a run that pass cannot
//! judge with certainty is left to the visitors above, as is the whole row when the stripped
//! copy is refused.

use std::cell::Cell;

use crate::event::{Event, EventData};
use crate::stream::StreamRecord;

thread_local! {
    static SKIMMING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `decode` with the calling thread skimming when `skim` is set (else as it is), and
/// restores the thread's mode afterwards, also when `decode` panics.
pub fn skimming<R>(skim: bool, decode: impl FnOnce() -> R) -> R {
    if !skim {
        return decode();
    }
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SKIMMING.with(|mode| mode.set(self.0));
        }
    }
    let _restore = Restore(SKIMMING.with(|mode| mode.replace(true)));
    decode()
}

/// The newtype name a skimmed string is asked for under (`Pieces`): a deserializer that
/// knows it may check the string without producing it and answer `visit_unit` (the binary
/// decoder: a string body that is ASCII needs no UTF-8 decoding), and any other value goes
/// the usual way. serde_json, like every deserializer that does not know the name, hands the
/// visitor itself over (`visit_newtype_struct`).
pub(crate) const SKIMMED_STRING: &str = "$sessionlog::SkimmedString";

/// The newtype names a skimmed packed run is asked for under: an array of strings (`Pieces`)
/// or of integers that fit an `i64` (`Gaps`). The binary decoder checks a whole run of
/// plain elements in one pass and answers `visit_unit`; it hands anything else (and every
/// deserializer that does not know the names hands everything) to the visitor itself, which
/// reads the array element by element as before, so every refusal reads as it did.
pub(crate) const SKIMMED_STRINGS: &str = "$sessionlog::SkimmedStrings";
pub(crate) const SKIMMED_INTEGERS: &str = "$sessionlog::SkimmedIntegers";

/// Whether the calling thread is skimming.
#[inline]
pub(crate) fn is_skimming() -> bool {
    SKIMMING.with(Cell::get)
}

/// `event` as a skimming decode yields it: the packed runs of its embedded stream hold no
/// pieces and no gaps; everything else is the event. What the tests compare skimmed decodes
/// with.
pub fn as_skimmed(mut event: Event) -> Event {
    let stream = match &mut event.data {
        EventData::AssistantMessage(d) => d.stream.as_mut(),
        EventData::AssistantAttempt(d) => Some(&mut d.stream),
        _ => None,
    };
    for record in stream.into_iter().flatten() {
        match record {
            StreamRecord::TextChunks(run) | StreamRecord::ReasoningChunks(run) => {
                run.texts = Default::default();
                run.dt = Default::default();
            }
            StreamRecord::ToolCallChunks(run) => {
                run.args = Default::default();
                run.dt = Default::default();
            }
            StreamRecord::Chunk(_) | StreamRecord::Other(_) => {}
        }
    }
    event
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_lasts_for_the_call_and_nests() {
        assert!(!is_skimming());
        skimming(true, || {
            assert!(is_skimming());
            skimming(false, || {
                assert!(is_skimming(), "false leaves the mode as it is")
            });
            skimming(true, || assert!(is_skimming()));
            assert!(is_skimming());
        });
        assert!(!is_skimming());
    }

    #[test]
    fn a_panic_does_not_leave_the_thread_skimming() {
        let caught = std::panic::catch_unwind(|| skimming(true, || panic!("in the decode")));
        assert!(caught.is_err());
        assert!(!is_skimming());
    }

    // Goal: a packed run whose `type` is not its first member (decoded through the buffered
    // object, a `serde_json::Value` deserializer) skims as one in order does, and refuses the
    // same bad element with the same text.
    #[test]
    fn a_run_with_its_tag_last_skims_too() {
        let late = r#"{"time0":1,"index":0,"dt":[2],"texts":["a","b"],"type":"text-chunks"}"#;
        let skimmed = skimming(true, || serde_json::from_str::<StreamRecord>(late));
        let whole: StreamRecord = serde_json::from_str(late).unwrap();
        let StreamRecord::TextChunks(whole_run) = &whole else {
            panic!("{whole:?}")
        };
        assert_eq!(whole_run.texts.len(), 2);
        let Ok(StreamRecord::TextChunks(run)) = skimmed else {
            panic!("{skimmed:?}")
        };
        assert!(run.texts.is_empty() && run.dt.is_empty());
        let bad = r#"{"time0":1,"index":0,"dt":[2],"texts":["a",7],"type":"text-chunks"}"#;
        let whole = serde_json::from_str::<StreamRecord>(bad)
            .unwrap_err()
            .to_string();
        let skimmed = skimming(true, || serde_json::from_str::<StreamRecord>(bad))
            .unwrap_err()
            .to_string();
        assert_eq!(skimmed, whole);
    }
}
