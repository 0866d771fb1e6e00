//! Standard input as a log that can be read more than once.
//!
//! Some commands read an older log twice (`check` runs the migration after the check pass,
//! `import` proves the migration before it writes, `messages` reads the header before it
//! migrates). A file is simply reopened; standard input cannot be, so everything read from it
//! is also kept in an unnamed temporary file (deleted by the system when the process ends), and
//! each reader of `-` starts at byte 0: it reads what is kept, then takes more from standard
//! input, keeping it as it goes. Memory stays one read buffer; the cost is disk, equal to the
//! bytes read from standard input. Nothing is kept in memory and standard input is read once.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, OnceLock};

/// Standard input and the copy of what has been read from it so far.
struct Spool {
    /// Created on first use; `None` until then.
    copy: Option<File>,
    /// Bytes of standard input read (and kept) so far.
    kept_bytes: u64,
    /// Standard input has ended.
    ended: bool,
}

static SPOOL: OnceLock<Mutex<Spool>> = OnceLock::new();

fn spool() -> &'static Mutex<Spool> {
    SPOOL.get_or_init(|| {
        Mutex::new(Spool {
            copy: None,
            kept_bytes: 0,
            ended: false,
        })
    })
}

/// A reader of standard input from its first byte.
#[derive(Debug)]
pub struct StdinInput {
    pos: u64,
}

impl StdinInput {
    /// A reader at byte 0 of standard input (which may have been read before).
    pub fn from_start() -> StdinInput {
        StdinInput { pos: 0 }
    }
}

impl Read for StdinInput {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        // A poisoned lock only means another reader panicked; the state is still whole
        // (`kept_bytes` moves only after the copy is written).
        let mut spool = spool().lock().unwrap_or_else(|p| p.into_inner());
        let copy = match spool.copy.take() {
            Some(copy) => copy,
            None => tempfile::tempfile()?,
        };
        let result = read_at(&mut spool, &copy, self.pos, buf);
        spool.copy = Some(copy);
        let n = result?;
        self.pos += n as u64;
        Ok(n)
    }
}

fn read_at(spool: &mut Spool, copy: &File, pos: u64, buf: &mut [u8]) -> io::Result<usize> {
    if pos < spool.kept_bytes {
        let available = (spool.kept_bytes - pos).min(buf.len() as u64) as usize;
        return copy.read_at(&mut buf[..available], pos);
    }
    if spool.ended {
        return Ok(0);
    }
    let n = loop {
        match io::stdin().lock().read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => break other?,
        }
    };
    if n == 0 {
        spool.ended = true;
        return Ok(0);
    }
    copy.write_all_at(&buf[..n], spool.kept_bytes)?;
    spool.kept_bytes += n as u64;
    Ok(n)
}
