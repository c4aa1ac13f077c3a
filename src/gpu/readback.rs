//! Bringing results back to the host: the pool of readback buffers that a recorder's downloads
//! copy into and that are mapped asynchronously after their submission, and the blocking read
//! through one staging buffer.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use bytemuck::Pod;

use super::device::Device;
use super::error::GpuError;
use super::memory::GpuBuffer;

/// What happens to a download's bytes once they are on the host.
pub type Completion = Box<dyn FnOnce(&[u8]) + Send>;

/// A recorded download, registered with the context when its segment is submitted.
pub(crate) struct Download {
    pub readback: GpuBuffer,
    pub bytes: u64,
    pub done: Completion,
    /// Whether the bytes count as traffic (the timeline's timestamps do not).
    pub counted: bool,
}

/// Readback buffers: free ones, and those holding a download not yet on the host.
#[derive(Default)]
struct Downloads {
    free: Vec<GpuBuffer>,
    in_flight: Vec<InFlight>,
    pooled_bytes: u64,
    /// The pool's limit when set (`set_readback_pool_bytes`), else `READBACK_POOL_BYTES`.
    cap: Option<u64>,
    /// Threads handing downloads taken out of `in_flight` to their completions now: a download
    /// has not landed until its completion ran, so waiters wait for these too.
    handing_over: usize,
    /// Downloads registered so far: the next one's number.
    registered: u64,
}

type MapState = Arc<Mutex<Option<Result<(), wgpu::BufferAsyncError>>>>;

struct InFlight {
    download: Download,
    mapped: MapState,
    /// The submission that copies into the readback buffer: waiting for it (not for the whole
    /// queue) is enough for the download to land.
    submission: Option<wgpu::SubmissionIndex>,
    /// Its number, in the order of registration (MPI ranks wait for the downloads before a
    /// mark).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    number: u64,
}

/// Readback buffers may hold this much before a new download waits for an earlier one.
const READBACK_POOL_BYTES: u64 = 64 << 20;

/// A context's readback side: the pool of readback buffers with the downloads in flight, and the
/// staging buffer of [`read`](Self::read).
#[derive(Default)]
pub(super) struct Readback {
    downloads: Mutex<Downloads>,
    staging: Mutex<Option<GpuBuffer>>,
}

impl Readback {
    /// A readback buffer of at least `bytes` from the pool; waits for an earlier download when
    /// the pool is full. With `may_defer`, `None` when the pool is full and no download is in
    /// flight: unsubmitted downloads (the caller's own, usually) hold it, and submitting them
    /// lets one land. Without, such a buffer is made beyond the pool's limit.
    pub(super) fn readback_buffer(
        &self,
        core: &Device,
        bytes: u64,
        may_defer: bool,
    ) -> Result<Option<GpuBuffer>, GpuError> {
        loop {
            {
                let mut d = self.downloads.lock().expect("download pool poisoned");
                let best = d
                    .free
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.bytes >= bytes)
                    .min_by_key(|(_, b)| b.bytes)
                    .map(|(i, _)| i);
                if let Some(i) = best {
                    return Ok(Some(d.free.swap_remove(i)));
                }
                let cap = d.cap.unwrap_or(READBACK_POOL_BYTES).max(bytes);
                // Free buffers (all too small to serve) give their memory back for a new one,
                // so a change of block size does not wait for downloads in flight.
                let free: u64 = d.free.iter().map(|b| b.bytes).sum();
                let fits = d.pooled_bytes - free + bytes <= cap;
                if may_defer && !fits && d.in_flight.is_empty() {
                    return Ok(None);
                }
                if fits || d.in_flight.is_empty() {
                    let released: u64 = d.free.drain(..).map(|b| b.bytes).sum();
                    d.pooled_bytes = d.pooled_bytes - released + bytes;
                    drop(d);
                    return core
                        .create_raw(
                            "readback",
                            bytes,
                            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                        )
                        .map(Some);
                }
            }
            // The pool is full: a buffer whose download has landed is reused without a wait;
            // only when none has does the host wait, for the oldest.
            if self.take_arrived_downloads(core)? == 0 {
                self.wait_for_oldest_download(core)?;
            }
        }
    }

    /// Limits the readback buffers to `bytes` in all (a memory plan counts them in its budget);
    /// a download that needs more waits for earlier ones to land.
    pub(super) fn set_readback_pool_bytes(&self, bytes: u64) {
        self.downloads.lock().expect("download pool poisoned").cap = Some(bytes);
    }

    /// Waits until the oldest download in flight has landed (only for the submission that
    /// copies it: later work stays queued, so the device keeps computing), and hands every
    /// download that has arrived to its completion.
    pub(super) fn wait_for_oldest_download(&self, core: &Device) -> Result<(), GpuError> {
        let oldest = {
            let d = self.downloads.lock().expect("download pool poisoned");
            match d.in_flight.first() {
                Some(f) => f.submission.clone(),
                None => return Ok(()),
            }
        };
        let Some(index) = oldest else {
            return self.poll_downloads(core, true);
        };
        core.counters.waits.fetch_add(1, Ordering::Relaxed);
        let polled = core.device.poll(wgpu::PollType::Wait {
            submission_index: Some(index),
            timeout: None,
        });
        core.check()?;
        polled.map_err(|e| GpuError::DeviceLost(e.to_string()))?;
        self.poll_downloads(core, false)
    }

    pub(super) fn register_download(
        &self,
        core: &Device,
        download: Download,
        submission: Option<wgpu::SubmissionIndex>,
    ) {
        let mapped: MapState = Arc::default();
        let state = mapped.clone();
        download.readback.buffer.slice(0..download.bytes).map_async(
            wgpu::MapMode::Read,
            move |r| {
                if let Ok(mut s) = state.lock() {
                    *s = Some(r);
                }
            },
        );
        if download.counted {
            core.counters
                .bytes_downloaded
                .fetch_add(download.bytes, Ordering::Relaxed);
        }
        let mut d = self.downloads.lock().expect("download pool poisoned");
        let number = d.registered;
        d.registered += 1;
        d.in_flight.push(InFlight {
            download,
            mapped,
            submission,
            number,
        });
    }

    /// Hands every download that has arrived to its completion; with `wait`, first waits for
    /// the device to finish what was submitted.
    pub(super) fn poll_downloads(&self, core: &Device, wait: bool) -> Result<(), GpuError> {
        if wait {
            core.wait()?;
            self.hand_over_arrived().map(|_| ())
        } else {
            self.take_arrived_downloads(core).map(|_| ())
        }
    }

    /// Hands the downloads that have arrived to their completions without waiting; returns how
    /// many did.
    fn take_arrived_downloads(&self, core: &Device) -> Result<usize, GpuError> {
        core.device
            .poll(wgpu::PollType::Poll)
            .map_err(|e| GpuError::DeviceLost(e.to_string()))?;
        self.hand_over_arrived()
    }

    /// Hands the downloads whose buffers are mapped to their completions and returns their
    /// buffers to the pool; returns how many.
    fn hand_over_arrived(&self) -> Result<usize, GpuError> {
        let arrived: Vec<InFlight> = {
            let mut d = self.downloads.lock().expect("download pool poisoned");
            let (ready, pending): (Vec<InFlight>, _) = std::mem::take(&mut d.in_flight)
                .into_iter()
                .partition(|f| f.mapped.lock().map(|m| m.is_some()).unwrap_or(true));
            d.in_flight = pending;
            d.handing_over += 1;
            ready
        };
        let handed = HandingOver(&self.downloads);
        let count = arrived.len();
        let mut first_error = None;
        for f in arrived {
            let result = f.mapped.lock().ok().and_then(|mut m| m.take());
            let Download {
                readback,
                bytes,
                done,
                ..
            } = f.download;
            match result {
                Some(Ok(())) => {
                    {
                        let view = readback
                            .buffer
                            .slice(0..bytes)
                            .get_mapped_range()
                            .map_err(|e| GpuError::Readback(e.to_string()))?;
                        done(&view);
                    }
                    readback.buffer.unmap();
                }
                Some(Err(e)) => {
                    first_error.get_or_insert(GpuError::Readback(e.to_string()));
                }
                None => {
                    first_error.get_or_insert(GpuError::Readback("a map callback vanished".into()));
                }
            }
            self.downloads
                .lock()
                .expect("download pool poisoned")
                .free
                .push(readback);
        }
        drop(handed);
        first_error.map_or(Ok(count), Err)
    }

    /// Whether downloads were submitted that have not been handed to their completions.
    pub(super) fn has_downloads_in_flight(&self) -> bool {
        !self
            .downloads
            .lock()
            .expect("download pool poisoned")
            .in_flight
            .is_empty()
    }

    /// Whether another thread is running completions of downloads it took out of those in
    /// flight (see [`Downloads::handing_over`]).
    pub(super) fn is_handing_over(&self) -> bool {
        self.downloads
            .lock()
            .expect("download pool poisoned")
            .handing_over
            > 0
    }

    /// Waits until every download is on the host (its completion run, on this thread or
    /// another).
    pub(super) fn complete_downloads(&self, core: &Device) -> Result<(), GpuError> {
        loop {
            if self.has_downloads_in_flight() {
                self.poll_downloads(core, true)?;
            } else if self.is_handing_over() {
                std::thread::yield_now();
            } else {
                return Ok(());
            }
        }
    }

    /// Copies `count` elements of `buffer` from element `offset` back to the host.
    pub(super) fn read<T: Pod>(
        &self,
        core: &Device,
        buffer: &GpuBuffer,
        offset: u64,
        count: usize,
    ) -> Result<Vec<T>, GpuError> {
        let size = std::mem::size_of::<T>() as u64;
        let bytes = count as u64 * size;
        if bytes == 0 {
            return Ok(Vec::new());
        }
        let chunk = (READ_STAGING_BYTES / size).max(1) * size;
        // One staging buffer per context, grown on demand and reused: solvers read a few scalars
        // back every iteration and must not allocate each time. The lock also serialises
        // readbacks from several threads, which would otherwise map the same buffer twice.
        let mut slot = self.staging.lock().expect("staging slot poisoned");
        let need = chunk.min(bytes);
        if slot.as_ref().is_none_or(|b| b.bytes < need) {
            let grown = read_staging_bytes(need);
            *slot = Some(core.create_raw(
                "readback staging",
                grown,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            )?);
        }
        let staging = slot.as_ref().expect("just ensured");
        core.counters
            .bytes_downloaded
            .fetch_add(bytes, Ordering::Relaxed);
        let mut out: Vec<T> = Vec::with_capacity(count);
        let mut done = 0u64;
        while done < bytes {
            let n = chunk.min(bytes - done);
            let mut enc = core.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&buffer.buffer, offset * size + done, &staging.buffer, 0, n);
            core.queue.submit([enc.finish()]);
            let slice = staging.buffer.slice(0..n);
            let (tx, rx) = std::sync::mpsc::channel();
            slice.map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
            core.wait()?;
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(GpuError::Readback(e.to_string())),
                Err(_) => return Err(GpuError::Readback("the map callback never ran".into())),
            }
            {
                let view = slice
                    .get_mapped_range()
                    .map_err(|e| GpuError::Readback(e.to_string()))?;
                out.extend_from_slice(bytemuck::cast_slice(&view));
            }
            staging.buffer.unmap();
            done += n;
        }
        Ok(out)
    }

    /// Lets go of the free readback buffers and the staging buffer of [`read`](Self::read)
    /// (grown to the largest read so far).
    pub(super) fn release_idle(&self) {
        {
            let mut d = self.downloads.lock().expect("download pool poisoned");
            let released: u64 = d.free.drain(..).map(|b| b.bytes).sum();
            d.pooled_bytes -= released;
        }
        *self.staging.lock().expect("staging slot poisoned") = None;
    }
}

/// The marks of the downloads that MPI ranks' exchanges wait for while later work computes
/// (see [`crate::distributed::ranks`]).
#[cfg(feature = "mpi")]
impl Readback {
    /// The number the next registered download gets: a mark that
    /// [`landed_before`](Self::landed_before) compares with.
    pub(super) fn download_mark(&self) -> u64 {
        self.downloads
            .lock()
            .expect("download pool poisoned")
            .registered
    }

    /// Whether every download registered before `mark` is on the host (its completion run).
    pub(super) fn landed_before(&self, mark: u64) -> bool {
        let d = self.downloads.lock().expect("download pool poisoned");
        d.handing_over == 0 && d.in_flight.iter().all(|f| f.number >= mark)
    }
}

/// Counts a thread out of [`Downloads::handing_over`] when it is done handing downloads over,
/// on every path out (a completion that panics included).
struct HandingOver<'a>(&'a Mutex<Downloads>);

impl Drop for HandingOver<'_> {
    fn drop(&mut self) {
        if let Ok(mut d) = self.0.lock() {
            d.handing_over -= 1;
        }
    }
}

/// Reads go through one staging buffer of at most 64 MiB at a time so that a readback never
/// needs a second copy of a large array on the device.
const READ_STAGING_BYTES: u64 = 64 << 20;

/// The staging buffer a read of `bytes` grows the context's to (it keeps it for later reads):
/// rounded up so that slightly larger reads reuse it too, at most 64 MiB unless one element is
/// larger.
pub(crate) fn read_staging_bytes(bytes: u64) -> u64 {
    bytes.next_power_of_two().min(READ_STAGING_BYTES.max(bytes))
}
