//! Timing, medians and peak memory, shared by the benchmark binaries.
//!
//! Peak memory is the kernel's resident high-water mark (`VmHWM` in `/proc/self/status`),
//! reset before a measurement by writing `5` to `/proc/self/clear_refs` (Linux 4.0 and later).
//! It counts every resident page of the process, so a measurement also sees the memory that
//! was already resident when it started (inputs prepared beforehand, and pages the allocator
//! kept from earlier work); [`Measured::rss_before_kib`] is reported beside it for that reason.
//! Where a clean figure matters (cold opens), the measurement runs in a fresh child process.

use std::time::Instant;

/// One timed run and its memory.
#[derive(Debug, Clone, Copy)]
pub struct Measured<T> {
    pub value: T,
    pub seconds: f64,
    /// Peak resident memory during the run, in KiB; 0 when the kernel does not report it.
    pub peak_kib: u64,
    /// Resident memory when the run started, in KiB.
    pub rss_before_kib: u64,
}

/// Runs `f` once, timing it and recording the resident high-water mark while it ran.
pub fn measure<T>(f: impl FnOnce() -> T) -> Measured<T> {
    reset_peak_rss();
    let rss_before_kib = status_kib("VmRSS:");
    let started = Instant::now();
    let value = std::hint::black_box(f());
    let seconds = started.elapsed().as_secs_f64();
    Measured {
        value,
        seconds,
        peak_kib: peak_rss_kib(),
        rss_before_kib,
    }
}

/// Seconds that `f` takes, once.
pub fn time<T>(f: impl FnOnce() -> T) -> f64 {
    let started = Instant::now();
    std::hint::black_box(f());
    started.elapsed().as_secs_f64()
}

/// The median of `samples` (the upper one of an even count). Panics on an empty slice.
pub fn median(samples: &[f64]) -> f64 {
    assert!(!samples.is_empty(), "a median needs at least one sample");
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[sorted.len() / 2]
}

/// Resets the resident high-water mark; false when the kernel refuses.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The resident high-water mark since the process started or the last reset, in KiB.
pub fn peak_rss_kib() -> u64 {
    status_kib("VmHWM:")
}

fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_takes_the_middle_sample() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 3.0);
    }

    #[test]
    fn measure_sees_a_large_allocation() {
        let run = measure(|| {
            let block = vec![1u8; 64 << 20];
            block.iter().map(|&b| u64::from(b)).sum::<u64>()
        });
        assert_eq!(run.value, 64 << 20);
        if run.peak_kib > 0 {
            assert!(run.peak_kib >= 64 * 1024, "{run:?}");
        }
    }
}
