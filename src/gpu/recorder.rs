//! Recording GPU work: dispatches, uploads and downloads, submitted in segments.
//!
//! Work is recorded, not run: [`GpuContext::submit`] sends it without waiting. Transfers are part
//! of the recording. An upload lands at the start of its segment's submission (wgpu's
//! `write_buffer` semantics), so a recorder starts a new segment before an upload whenever the
//! current one already holds commands: the commands recorded before the upload see the old
//! contents, those after it the new ones, whatever buffer the upload targets. The upload's bytes
//! go into a staging allocation of wgpu's own when its segment is submitted, so one device buffer
//! per staging role serves every chunk: the next chunk's block is submitted while the commands of
//! the previous chunk that read the buffer are still queued, without a wait (a second device
//! buffer would not let its copy start earlier; it follows the queued compute either way). A
//! download copies into a readback buffer from the context's pool; after the submission the buffer
//! is mapped asynchronously and its bytes are handed to the download's completion when the host
//! next polls (a wait happens only where a readback buffer about to be reused has not landed or a
//! block a download writes is needed, and then only for the submission that copies it: later work
//! stays queued and the device keeps computing).

use bytemuck::Pod;

use super::bind::Bound;
use super::context::GpuContext;
use super::error::GpuError;
use super::memory::GpuBuffer;
use super::readback::{Completion, Download};

// The context's ways to start and submit recordings live here, above the context: a recorder
// works on a context, so context.rs cannot name the recorder without an import circle.
impl GpuContext {
    /// Starts recording dispatches into one compute pass.
    pub fn recorder(&self, label: &str) -> Recorder {
        Recorder::new(self, label, false)
    }

    /// Like [`recorder`](Self::recorder), with GPU timestamps around the pass when the device has
    /// them ([`Recorder::finish_timed`] then reports the GPU time).
    pub fn timed_recorder(&self, label: &str) -> Recorder {
        Recorder::new(self, label, self.has_timestamps())
    }

    /// Submits the recorded work without waiting for it: the ordinary way to run work. Errors
    /// the device reported so far are raised here; later ones at the next wait.
    pub fn submit(&self, recorder: Recorder) -> Result<(), GpuError> {
        recorder.finish(self)
    }

    /// Submits the recorded work and waits until the device is idle: for timing and for the
    /// places that need a result before they can go on (the name says that it blocks).
    pub fn submit_and_wait(&self, recorder: Recorder) -> Result<(), GpuError> {
        recorder.finish_timed(self).map(|_| ())
    }
}

/// Records dispatches and transfers; see the module documentation.
pub struct Recorder {
    label: String,
    encoder: Option<wgpu::CommandEncoder>,
    pass: Option<wgpu::ComputePass<'static>>,
    timer: Option<wgpu::QuerySet>,
    /// Whether a pass has written the timer's beginning.
    timer_begun: bool,
    /// With the context's timeline on: the device, to bracket every pass with timestamps, and
    /// the query sets of the current segment's passes.
    timeline: Option<wgpu::Device>,
    pass_timers: Vec<wgpu::QuerySet>,
    max_groups: u32,
    uploads: Vec<(wgpu::Buffer, u64, Vec<u8>)>,
    downloads: Vec<Download>,
    /// Whether the current segment holds commands.
    commands: bool,
}

impl Recorder {
    pub(crate) fn new(ctx: &GpuContext, label: &str, timed: bool) -> Self {
        let timer = timed.then(|| {
            ctx.core.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("lamino timer"),
                ty: wgpu::QueryType::Timestamp,
                count: 2,
            })
        });
        Self {
            label: label.to_string(),
            encoder: Some(Self::encoder(ctx, label)),
            pass: None,
            timeline: (!timed && ctx.timeline_on()).then(|| ctx.core.device.clone()),
            pass_timers: Vec::new(),
            timer,
            timer_begun: false,
            max_groups: ctx.max_workgroups_per_dimension(),
            uploads: Vec::new(),
            downloads: Vec::new(),
            commands: false,
        }
    }

    fn encoder(ctx: &GpuContext, label: &str) -> wgpu::CommandEncoder {
        ctx.core
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) })
    }

    fn pass(&mut self) -> &mut wgpu::ComputePass<'static> {
        if self.pass.is_none() {
            let encoder = self.encoder.as_mut().expect("recorder already finished");
            // With the timeline on, every pass gets its own pair of timestamps.
            if let Some(device) = &self.timeline {
                self.pass_timers
                    .push(device.create_query_set(&wgpu::QuerySetDescriptor {
                        label: Some("lamino timeline"),
                        ty: wgpu::QueryType::Timestamp,
                        count: 2,
                    }));
            }
            // A timed recorder's span runs from its first pass's beginning to its last pass's
            // end (a fill or copy between passes splits them): later passes write the end only.
            let first = !self.timer_begun;
            self.timer_begun = true;
            let timestamp_writes = match (&self.timer, self.pass_timers.last()) {
                (Some(q), _) => Some(wgpu::ComputePassTimestampWrites {
                    query_set: q,
                    beginning_of_pass_write_index: first.then_some(0),
                    end_of_pass_write_index: Some(1),
                }),
                (None, Some(q)) => Some(wgpu::ComputePassTimestampWrites {
                    query_set: q,
                    beginning_of_pass_write_index: Some(0),
                    end_of_pass_write_index: Some(1),
                }),
                (None, None) => None,
            };
            let pass = encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(&self.label),
                    timestamp_writes,
                })
                .forget_lifetime();
            self.pass = Some(pass);
        }
        self.pass.as_mut().expect("just begun")
    }

    /// Ends the current pass before a command outside passes (a fill, a copy). A timed
    /// recorder whose span has not begun begins it with an empty pass first, so that its time
    /// counts whatever was recorded, passes or not.
    fn end_pass(&mut self) {
        if self.timer.is_some() && !self.timer_begun {
            self.pass();
        }
        drop(self.pass.take());
    }

    /// Dispatches `groups` workgroups of `bound`'s kernel. Counts above the per-dimension limit are
    /// laid out in two dimensions; kernels linearise `workgroup_id` with `num_workgroups`.
    pub fn dispatch(&mut self, bound: &Bound, groups: u32) {
        if groups == 0 {
            return;
        }
        let x = groups.min(self.max_groups);
        let y = groups.div_ceil(x);
        let pass = self.pass();
        pass.set_pipeline(&bound.kernel.pipeline);
        pass.set_bind_group(0, &bound.group, &[]);
        pass.dispatch_workgroups(x, y, 1);
        self.commands = true;
    }

    /// Writes `data` into `buffer` at element `offset`, visible to every command recorded after
    /// this call (a new segment starts first when the current one holds commands).
    pub fn upload<T: Pod>(
        &mut self,
        ctx: &GpuContext,
        buffer: &GpuBuffer,
        offset: u64,
        data: &[T],
    ) -> Result<(), GpuError> {
        debug_assert!(self.timer.is_none(), "timed recordings hold no transfers");
        if self.commands {
            self.flush(ctx)?;
        }
        let bytes: &[u8] = bytemuck::cast_slice(data);
        if !bytes.is_empty() {
            let at = offset * std::mem::size_of::<T>() as u64;
            self.uploads
                .push((buffer.buffer.clone(), at, bytes.to_vec()));
        }
        Ok(())
    }

    /// Like [`upload`](Self::upload), with the data made by `data` after the segment boundary:
    /// what `data` reads from the host (an array that downloads fill) is what the commands
    /// recorded so far left there, once they are submitted and their downloads have landed.
    pub fn upload_with<T: Pod>(
        &mut self,
        ctx: &GpuContext,
        buffer: &GpuBuffer,
        offset: u64,
        data: impl FnOnce() -> Result<Vec<T>, GpuError>,
    ) -> Result<(), GpuError> {
        if self.commands {
            self.flush(ctx)?;
        }
        let data = data()?;
        self.upload(ctx, buffer, offset, &data)
    }

    /// Copies `bytes` of `buffer` from byte `offset` to the host once the commands recorded
    /// before it have run; `done` receives them when the host next polls the context.
    pub fn download(
        &mut self,
        ctx: &GpuContext,
        buffer: &GpuBuffer,
        offset: u64,
        bytes: u64,
        done: Completion,
    ) -> Result<(), GpuError> {
        debug_assert!(self.timer.is_none(), "timed recordings hold no transfers");
        let readback = match ctx.readback.readback_buffer(&ctx.core, bytes, true)? {
            Some(buffer) => buffer,
            None => {
                // Unsubmitted downloads (this recording's) fill the pool: submit them, so
                // that the pool can wait for the oldest to land and reuse its buffer.
                self.flush(ctx)?;
                ctx.readback
                    .readback_buffer(&ctx.core, bytes, false)?
                    .expect("made when it cannot wait")
            }
        };
        drop(self.pass.take());
        let encoder = self.encoder.as_mut().expect("recorder already finished");
        encoder.copy_buffer_to_buffer(&buffer.buffer, offset, &readback.buffer, 0, bytes);
        self.downloads.push(Download {
            readback,
            bytes,
            done,
            counted: true,
        });
        self.commands = true;
        Ok(())
    }

    /// Copies `bytes` from byte `from` of `source` to byte `to` of `target` on the device, after
    /// the commands recorded before it: no host <-> device traffic.
    pub fn copy(
        &mut self,
        (source, from): (&GpuBuffer, u64),
        (target, to): (&GpuBuffer, u64),
        bytes: u64,
    ) {
        if bytes == 0 {
            return;
        }
        self.end_pass();
        let encoder = self.encoder.as_mut().expect("recorder already finished");
        encoder.copy_buffer_to_buffer(&source.buffer, from, &target.buffer, to, bytes);
        self.commands = true;
    }

    /// Sets `bytes` of `buffer` from byte `offset` (both multiples of 4) to zero on the device,
    /// after the commands recorded before it: a fill, not a kernel (a memset on CPU adapters).
    pub fn clear(&mut self, buffer: &GpuBuffer, offset: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.end_pass();
        let encoder = self.encoder.as_mut().expect("recorder already finished");
        encoder.clear_buffer(&buffer.buffer, offset, Some(bytes));
        self.commands = true;
    }

    /// Submits what the current segment holds (uploads first) and starts a new segment.
    pub fn flush(&mut self, ctx: &GpuContext) -> Result<(), GpuError> {
        self.submit_segment(ctx, false)?;
        self.encoder = Some(Self::encoder(ctx, &self.label));
        Ok(())
    }

    fn submit_segment(&mut self, ctx: &GpuContext, last: bool) -> Result<(), GpuError> {
        drop(self.pass.take());
        self.record_timeline(ctx)?;
        let encoder = self.encoder.take().expect("recorder already finished");
        for (buffer, at, bytes) in self.uploads.drain(..) {
            ctx.core.queue.write_buffer(&buffer, at, &bytes);
            ctx.core.count_upload(bytes.len() as u64);
        }
        let mut submission = None;
        if self.commands || last {
            submission = Some(ctx.core.queue.submit([encoder.finish()]));
            ctx.core.count_submission();
        }
        for download in self.downloads.drain(..) {
            ctx.readback
                .register_download(&ctx.core, download, submission.clone());
        }
        self.commands = false;
        ctx.check()
    }

    /// Resolves the timestamps of the current segment's passes and downloads them into the
    /// context's timeline (not counted as traffic).
    fn record_timeline(&mut self, ctx: &GpuContext) -> Result<(), GpuError> {
        if self.pass_timers.is_empty() {
            return Ok(());
        }
        // Each pass's pair is resolved at its own aligned offset (wgpu requires 256 bytes).
        let stride = wgpu::QUERY_RESOLVE_BUFFER_ALIGNMENT;
        let bytes = stride * self.pass_timers.len() as u64;
        let resolve = ctx.core.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timeline timestamps"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        // Called while submitting, so it cannot defer: made beyond the pool's limit if need be
        // (a few bytes, and only while a benchmark keeps the timeline).
        let readback = ctx
            .readback
            .readback_buffer(&ctx.core, bytes, false)?
            .expect("made when it cannot wait");
        let encoder = self.encoder.as_mut().expect("recorder already finished");
        for (i, q) in self.pass_timers.drain(..).enumerate() {
            encoder.resolve_query_set(&q, 0..2, &resolve, stride * i as u64);
        }
        encoder.copy_buffer_to_buffer(&resolve, 0, &readback.buffer, 0, bytes);
        let period = ctx.core.queue.get_timestamp_period() as f64;
        let spans = ctx.timeline_spans();
        self.downloads.push(Download {
            readback,
            bytes,
            done: Box::new(move |b: &[u8]| {
                if let Ok(mut spans) = spans.lock() {
                    spans.extend(b.chunks_exact(stride as usize).map(|pair| {
                        let at = |i: usize| {
                            let word: [u8; 8] = pair[8 * i..8 * i + 8].try_into().expect("8 bytes");
                            u64::from_le_bytes(word) as f64 * period
                        };
                        (at(0), at(1))
                    }));
                }
            }),
            counted: false,
        });
        self.commands = true;
        Ok(())
    }

    /// Submits without waiting (timestamps, if recorded, are not read).
    pub(crate) fn finish(mut self, ctx: &GpuContext) -> Result<(), GpuError> {
        self.submit_segment(ctx, false)
    }

    /// Submits, waits, and returns the GPU time of the pass in milliseconds when it was recorded
    /// with timestamps.
    pub fn finish_timed(mut self, ctx: &GpuContext) -> Result<Option<f64>, GpuError> {
        drop(self.pass.take());
        let readback = match &self.timer {
            Some(q) => {
                let resolve = ctx.core.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("timestamps"),
                    size: 16,
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                });
                if self.commands {
                    let encoder = self.encoder.as_mut().expect("recorder already finished");
                    encoder.resolve_query_set(q, 0..2, &resolve, 0);
                }
                Some(GpuBuffer {
                    buffer: resolve,
                    bytes: 16,
                    label: "timestamps".into(),
                    allocation: None,
                })
            }
            None => None,
        };
        let timed = self.commands;
        self.submit_segment(ctx, true)?;
        ctx.wait()?;
        match readback {
            Some(buf) if timed => {
                let t: Vec<u64> = ctx.read(&buf, 0, 2)?;
                let period = ctx.core.queue.get_timestamp_period() as f64;
                Ok(Some(t[1].wrapping_sub(t[0]) as f64 * period / 1e6))
            }
            _ => Ok(None),
        }
    }
}
