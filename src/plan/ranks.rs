//! Plans of one member of a team (a device of several, or an MPI rank's device): its share of
//! every array ([`Portion`], the shares as [`crate::distributed::shares`] assigns them) against its
//! own device budget and buffer limits, so that where the shares fit, the member is in-core
//! however large the whole arrays are ([`plan_member`], [`member_plans`]).

use serde::Serialize;

use super::{plan_streaming, Budgets, MemoryPlan, Mode, PlanError, Portion};
use crate::gpu::GpuContext;
use crate::operator::{Geometry, OperatorOptions};
use crate::params::AdmmParams;

/// What one member's plan says, for the plan's report (`reconstruct --dry-run`) and the cost
/// model: whether its shares fit its device (in-core) or stream, and its bytes.
#[derive(Debug, Clone, Serialize)]
pub struct MemberPlan {
    /// The MPI rank (0 in one process).
    pub rank: usize,
    /// The device of the rank.
    pub device: usize,
    pub portion: Portion,
    pub mode: Mode,
    /// Arrays whose share is on the device (of [`Array::BY_TRAFFIC`]).
    pub resident_arrays: usize,
    /// Bytes of the member's shares of every array (and the spectrum's exchange room).
    pub share_bytes: u64,
    pub device_bytes: u64,
    pub host_bytes: u64,
    pub scratch_bytes: u64,
    /// Its host <-> device bytes per outer iteration.
    pub bytes_moved_per_iteration: u64,
}

impl MemberPlan {
    fn of(rank: usize, device: usize, p: &MemoryPlan) -> Self {
        Self {
            rank,
            device,
            portion: p.portion,
            mode: p.mode,
            resident_arrays: p.resident_arrays(),
            share_bytes: p.arrays.iter().map(|a| a.bytes).sum(),
            device_bytes: p.device_bytes,
            host_bytes: p.host_bytes,
            scratch_bytes: p.scratch_bytes,
            bytes_moved_per_iteration: p.bytes_moved_per_iteration,
        }
    }
}

/// The plan of member `portion` of a team: its shares of every array within `budgets` (one
/// device's memory and one member's host memory), in-core when they all fit the device budget
/// and each share one buffer, else streaming with the most accessed shares resident. Chunks as
/// the plan of one device with those budgets. Nothing is allocated and the scratch directory is
/// not looked at.
pub fn plan_member(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    caps: &OperatorOptions,
    budgets: &Budgets,
    portion: Portion,
) -> Result<MemoryPlan, PlanError> {
    plan_streaming(ctx, g, params, caps, budgets, false, portion)
}

/// The plans of every member of `ranks` ranks of `devices` devices each (members numbered rank
/// by rank, as the team numbers them), each within `budgets`.
pub fn member_plans(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    caps: &OperatorOptions,
    budgets: &Budgets,
    (ranks, devices): (usize, usize),
) -> Result<Vec<MemberPlan>, PlanError> {
    let members = ranks.max(1) * devices.max(1);
    (0..members)
        .map(|member| {
            let portion = Portion { member, members };
            let p = plan_member(ctx, g, params, caps, budgets, portion)?;
            Ok(MemberPlan::of(
                member / devices.max(1),
                member % devices.max(1),
                &p,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::Residency;
    use crate::operator::LaminoOperator;
    use crate::plan::Array;
    use crate::plan::{plan_on_paper, MemoryPlan};

    fn geometry(n: usize) -> Geometry {
        Geometry::cube(
            n,
            n,
            std::f64::consts::FRAC_PI_2 + std::f64::consts::FRAC_PI_6,
        )
    }

    #[test]
    fn the_members_shares_make_the_whole_and_the_spectrum_has_room_for_its_exchange() {
        let g = geometry(30);
        for members in [1, 2, 3, 4, 7] {
            for a in Array::BY_TRAFFIC {
                let shares: u64 = (0..members)
                    .map(|member| Portion { member, members }.share_bytes(a, &g))
                    .sum();
                assert_eq!(shares, a.layout(&g).bytes(), "{a:?} on {members}");
                let first = Portion { member: 0, members };
                let held = first.held_bytes(a, &g);
                let share = first.share_bytes(a, &g);
                match (a, members) {
                    (Array::Spectrum, 2..) => assert_eq!(held, 2 * share),
                    _ => assert_eq!(held, share),
                }
            }
            let rows: u64 = (0..members)
                .map(|member| Portion { member, members }.u2_table_bytes(&g))
                .sum();
            assert_eq!(rows, LaminoOperator::u2_table_bytes(&g));
        }
    }

    /// The case in small: one device whose memory and largest buffer hold no whole
    /// array's worth of the plan streams, and so does the plan that sees K such devices as one
    /// (K times the memory, the same largest buffer); each of K members, planned on its own
    /// device, is in-core and moves nothing between host and device.
    #[test]
    fn members_whose_shares_fit_are_in_core_where_one_device_streams() {
        let ctx = crate::gpu::test_context();
        let g = geometry(64);
        let params = AdmmParams::default();
        let caps = OperatorOptions::default();
        let need = MemoryPlan::in_core(&ctx, &g, &params, &caps)
            .unwrap()
            .device_bytes;
        let k = 4u64;
        // Room for a quarter of the arrays and the operator, and a largest buffer below the
        // largest whole array but above its share.
        let device = need / 2;
        let largest = Array::BY_TRAFFIC
            .iter()
            .map(|a| a.layout(&g).bytes())
            .max()
            .unwrap();
        let buffer = largest / 2;
        let one = Budgets::given(device, u64::MAX, None).for_max_buffer(buffer);
        let single = plan_on_paper(&ctx, &g, &params, &caps, &one).unwrap();
        assert_eq!(single.mode, Mode::Streaming);
        assert!(single.bytes_moved_per_iteration > 0);
        let as_one = Budgets::given(device * k, u64::MAX, None).for_max_buffer(buffer);
        let pooled = plan_on_paper(&ctx, &g, &params, &caps, &as_one).unwrap();
        assert_eq!(pooled.mode, Mode::Streaming, "no whole array fits a buffer");
        let plans = member_plans(&ctx, &g, &params, &caps, &one, (k as usize, 1)).unwrap();
        assert_eq!(plans.len(), k as usize);
        for m in &plans {
            assert_eq!(m.mode, Mode::InCore, "{m:?}");
            assert_eq!(m.bytes_moved_per_iteration, 0, "{m:?}");
            assert!(m.device_bytes <= device, "{m:?}");
            assert_eq!(m.resident_arrays, Array::BY_TRAFFIC.len());
        }
        // Members are numbered rank by rank, as the team numbers them.
        let two = member_plans(&ctx, &g, &params, &caps, &one, (2, 2)).unwrap();
        let ids: Vec<_> = two.iter().map(|m| (m.rank, m.device)).collect();
        assert_eq!(ids, [(0, 0), (0, 1), (1, 0), (1, 1)]);
        // A member with too little memory for its shares streams them, moving its part only.
        let small = Budgets::given(need / 8, u64::MAX, None);
        let whole = plan_on_paper(&ctx, &g, &params, &caps, &small).unwrap();
        let portion = Portion {
            member: 0,
            members: 2,
        };
        let half = plan_member(&ctx, &g, &params, &caps, &small, portion).unwrap();
        assert_eq!(half.mode, Mode::Streaming);
        assert_eq!(half.portion, portion);
        assert!(half.bytes_moved_per_iteration < whole.bytes_moved_per_iteration);
        assert!(half.host_bytes < whole.host_bytes);
        assert!(half.arrays.iter().any(|a| a.residency == Residency::Device));
    }
}
