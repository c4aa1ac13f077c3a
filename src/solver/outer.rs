//! The outer loop of ADMM, written once for whatever drives it: the one-device solver (tests,
//! benchmarks), a team of devices and ranks under the reconstructor (checkpoints, progress,
//! cancellation), the convergence benchmarks that read every iterate.

use super::report::{IterationReport, StopReason};

/// Runs outer iterations of `state`: while `stop_reason` (the parameters' rule) says go on, one
/// `step`, then `after` with the state and that step's report, which may stop the run (`false`).
/// Gives every report and the rule's reason to stop, `None` when `after` stopped the run.
pub fn outer_loop<S, E>(
    state: &mut S,
    stop_reason: impl Fn(&S) -> Option<StopReason>,
    mut step: impl FnMut(&mut S) -> Result<IterationReport, E>,
    mut after: impl FnMut(&mut S, &IterationReport) -> Result<bool, E>,
) -> Result<(Vec<IterationReport>, Option<StopReason>), E> {
    let mut reports = Vec::new();
    loop {
        if let Some(reason) = stop_reason(state) {
            return Ok((reports, Some(reason)));
        }
        let report = step(state)?;
        let go_on = after(state, &report)?;
        reports.push(report);
        if !go_on {
            return Ok((reports, None));
        }
    }
}
