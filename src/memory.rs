//! Host memory: what this machine has, and refusing up front work that would not fit, so that a
//! too-large request ends in a message naming sizes rather than an allocation abort.

use thiserror::Error;

/// A request that needs more host memory than is available.
#[derive(Debug, Error)]
#[error(
    "{what} needs {needed} bytes ({needed_gib:.2} GiB) of host memory, more than the {available} \
     bytes ({available_gib:.2} GiB) {source_of_limit}; {advice}"
)]
pub struct HostMemoryError {
    pub what: String,
    pub needed: u64,
    pub needed_gib: f64,
    pub available: u64,
    pub available_gib: f64,
    /// Where the limit comes from ("available on this machine", "of --max-host-memory").
    pub source_of_limit: &'static str,
    pub advice: &'static str,
}

const GIB: f64 = (1u64 << 30) as f64;

/// The machine's memory as the operating system reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostMemory {
    /// Installed memory in bytes.
    pub total: u64,
    /// Memory that can be allocated without swapping, in bytes.
    pub available: u64,
}

impl HostMemory {
    /// Reads the current figures.
    pub fn now() -> Self {
        let mut system = sysinfo::System::new();
        system.refresh_memory();
        Self {
            total: system.total_memory(),
            available: system.available_memory(),
        }
    }
}

/// Resident set size of this process in bytes (0 where the platform does not report it).
pub fn resident_bytes() -> u64 {
    let mut system = sysinfo::System::new();
    let Ok(pid) = sysinfo::get_current_pid() else {
        return 0;
    };
    system.refresh_processes(sysinfo::ProcessesToUpdate::Some(&[pid]), true);
    system.process(pid).map_or(0, |p| p.memory())
}

/// Refuses `what` when it needs more than the memory available now.
pub fn check_available(
    what: &str,
    needed: u64,
    advice: &'static str,
) -> Result<(), HostMemoryError> {
    check_limit(
        what,
        needed,
        HostMemory::now().available,
        "available on this machine",
        advice,
    )
}

/// Refuses `what` when it needs more than `limit` bytes.
pub fn check_limit(
    what: &str,
    needed: u64,
    limit: u64,
    source_of_limit: &'static str,
    advice: &'static str,
) -> Result<(), HostMemoryError> {
    if needed <= limit {
        return Ok(());
    }
    Err(HostMemoryError {
        what: what.to_string(),
        needed,
        needed_gib: needed as f64 / GIB,
        available: limit,
        available_gib: limit as f64 / GIB,
        source_of_limit,
        advice,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_reports_memory_and_this_process_uses_some() {
        let m = HostMemory::now();
        assert!(
            m.total > 0 && m.available > 0 && m.available <= m.total,
            "{m:?}"
        );
        assert!(resident_bytes() > 0);
    }

    #[test]
    fn requests_beyond_the_limit_are_refused_with_sizes() {
        check_limit("x", 10, 10, "of the test", "none").unwrap();
        let e = check_limit("a volume", 3 << 30, 1 << 30, "of the test", "shrink it").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("a volume") && msg.contains("3.00 GiB") && msg.contains("1.00 GiB"),
            "{msg}"
        );
        assert!(check_available("everything", u64::MAX, "none").is_err());
    }
}
