//! Device memory: lamino's buffers and the ledger that counts what they hold against the budget
//! of a run. A buffer's ledger entry lives as long as the last handle to the buffer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Device memory held by lamino's buffers on one context: now, at the peak, and the budget that
/// no allocation may cross.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pub(super) held: AtomicU64,
    pub(super) peak: AtomicU64,
    pub(super) budget: AtomicU64,
}

impl Ledger {
    /// Records `bytes` more, or refuses them (and records nothing) beyond the budget.
    pub(super) fn reserve(&self, bytes: u64) -> Result<(), u64> {
        let budget = self.budget.load(Ordering::SeqCst);
        let mut held = self.held.load(Ordering::SeqCst);
        loop {
            let next = held.saturating_add(bytes);
            if budget != 0 && next > budget {
                return Err(held);
            }
            match self
                .held
                .compare_exchange(held, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    self.peak.fetch_max(next, Ordering::SeqCst);
                    return Ok(());
                }
                Err(now) => held = now,
            }
        }
    }
}

/// One allocation's entry in the ledger, released when the last handle to the buffer (its
/// `GpuBuffer` clones and the bind groups over it) is dropped.
#[derive(Debug)]
pub(crate) struct Allocation {
    pub(super) bytes: u64,
    pub(super) ledger: Arc<Ledger>,
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.ledger.held.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// A buffer on the device with its size and label (labels show up in validation messages).
#[derive(Debug, Clone)]
pub struct GpuBuffer {
    pub(crate) buffer: wgpu::Buffer,
    pub(crate) bytes: u64,
    pub(crate) label: String,
    pub(crate) allocation: Option<Arc<Allocation>>,
}

impl GpuBuffer {
    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// The label given at creation.
    pub fn label(&self) -> &str {
        &self.label
    }
}
