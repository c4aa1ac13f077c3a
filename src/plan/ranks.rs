//! Plans of one member of a team (a device of several, or an MPI rank's device): its share of
//! every array ([`Portion`], the shares as [`crate::distributed::shares`] assigns them) against its
//! own device budget and buffer limits, so that where the shares fit, the member is in-core
//! however large the whole arrays are. [`plan_member`] plans a member with chunks of its own
//! (the cost model's plans); [`member_plans`] says what each member of a run does under the
//! team's plan, which the run follows: a member whose homes fit its device keeps them there.
//! [`chunks_for_homes`] picks the team's chunks so that the fewest members can keep them.

use serde::Serialize;

use super::{
    assemble, chunk_options, fits_a_buffer, halved, plan_streaming, with_adjoint_gridding, Array,
    Budgets, MemoryPlan, Mode, PlanError, Portion, PACKED_SHARE,
};
use crate::array::Residency;
use crate::geometry::Geometry;
use crate::gpu::GpuContext;
use crate::operator::{LaminoOperator, OperatorOptions};
use crate::params::AdmmParams;

/// Teams run the gridding inner loop (the Toeplitz loop runs on one device).
const GRIDDING: super::NormalLoop = super::NormalLoop::Gridding;

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
    /// Bytes of the member's shares of every array.
    pub share_bytes: u64,
    pub device_bytes: u64,
    pub host_bytes: u64,
    pub scratch_bytes: u64,
    /// Its host <-> device bytes per outer iteration for its own shares. A member of a team
    /// moves the blocks it exchanges with the others over the bus besides (not planned: the
    /// run's report counts them).
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

/// The plan of member `portion` of a team with chunks of its own: its shares of every array
/// within `budgets` (one device's memory and one member's host memory), in-core when they all
/// fit the device budget and each share one buffer, else streaming with the most accessed
/// shares resident. Chunks as the plan of one device with those budgets. Nothing is allocated
/// and the scratch directory is not looked at. (A run's members take the team's chunks:
/// [`member_plans`].)
pub fn plan_member(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    caps: &OperatorOptions,
    budgets: &Budgets,
    portion: Portion,
) -> Result<MemoryPlan, PlanError> {
    with_adjoint_gridding(caps, |caps| {
        plan_streaming(ctx, g, params, caps, budgets, (GRIDDING, (false, portion)))
    })
}

/// What member `portion` of a team does under the team's plan `shared` ([`super::plan_shared`]:
/// its chunks, staging buffers and where the U2 tables are, which every member takes; of the
/// tables, a member holds its chunks' rows only): in-core where its homes of every array
/// ([`Portion::home`]) fit its device budget beside what `shared` holds there, each in one buffer (it then keeps them on its device for the whole run, and only the
/// blocks it exchanges with the others cross the bus); else it streams its share of the
/// arrays through its staging buffers as `shared` says.
pub fn team_member_plan(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    shared: &MemoryPlan,
    portion: Portion,
) -> Result<MemoryPlan, PlanError> {
    let chunks = shared.chunks;
    let homes: u64 = Array::BY_TRAFFIC
        .iter()
        .map(|&a| portion.home_bytes(a, g, chunks))
        .sum();
    let tables = shared.u2_tables == Residency::Device;
    // Resident, the team's plan holds the tables of every detector row; a member holds those
    // of its chunks' rows (its home of the spectrum) only.
    let others_tables = if tables {
        let held = portion.home(Array::Spectrum, g, chunks).len();
        (g.deth - held) as u64 * (LaminoOperator::u2_table_bytes(g) / g.deth as u64)
    } else {
        0
    };
    let device = shared.device_bytes - others_tables;
    let budget = (shared.budgets.device_bytes as f64 * PACKED_SHARE) as u64;
    let fit = device.saturating_add(homes) <= budget
        && Array::BY_TRAFFIC
            .iter()
            .all(|&a| fits_a_buffer(ctx, &shared.budgets, portion.home_bytes(a, g, chunks)));
    let resident = if fit { Array::BY_TRAFFIC.len() } else { 0 };
    let mut p = assemble(
        ctx,
        g,
        params,
        shared.operator,
        (shared.staging_words, device),
        (resident, tables, GRIDDING),
        (shared.budgets.clone(), portion),
    )?;
    if fit {
        // The homes, not the shares with the spectrum's exchange room: the blocks a member
        // exchanges pass through its staging buffers. Its planes stay in host memory too,
        // the medium of the exchanges, and streaming it would move nothing.
        p.mode = Mode::InCore;
        for a in &mut p.arrays {
            a.bytes = portion.home_bytes(a.array, g, chunks);
        }
        p.device_bytes = device + homes;
        p.host_bytes = homes;
    }
    Ok(p)
}

/// The most members [`chunks_for_homes`] plans for.
const MOST_MEMBERS_FOR_HOMES: usize = 1024;

/// The team's streaming plan whose chunks let its members keep their homes on their devices
/// from the fewest members on: of the halving ladder from `caps`' chunks, the largest chunks
/// under which the first member (the largest homes) of the fewest members is in-core beside
/// the plan. One device's streaming plan spends up to half its budget on chunk and staging
/// buffers, beside which a member's homes may not fit however many members share the arrays.
/// The chunks depend on the geometry, the device and its budget only, not on how many members
/// run, so neither do the bits; `None` when no chunks let 1024 members keep their homes.
pub(super) fn chunks_for_homes(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    caps: &OperatorOptions,
    budgets: &Budgets,
) -> Result<Option<MemoryPlan>, PlanError> {
    let mut best: Option<(usize, MemoryPlan)> = None;
    let mut rung = Some(LaminoOperator::chunk_sizes(ctx, g, caps)?);
    while let Some(chunks) = rung {
        rung = halved(chunks);
        // Chunks whose buffers do not fit beside the least streaming needs are passed over.
        let whole = Portion::WHOLE;
        let options = chunk_options(caps, chunks);
        let Ok(shared) =
            plan_streaming(ctx, g, params, &options, budgets, (GRIDDING, (true, whole)))
        else {
            continue;
        };
        // More members hold smaller homes and fewer rows of the tables beside the same plan:
        // the fewest members in-core under it, by bisection.
        let in_core = |members| -> Result<bool, PlanError> {
            let first = Portion { member: 0, members };
            Ok(team_member_plan(ctx, g, params, &shared, first)?.mode == Mode::InCore)
        };
        let most = best.as_ref().map_or(MOST_MEMBERS_FOR_HOMES, |(k, _)| k - 1);
        if most < 2 || !in_core(most)? {
            continue;
        }
        let (mut lo, mut hi) = (1, most);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            if in_core(mid)? {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        best = Some((hi, shared));
    }
    Ok(best.map(|(_, shared)| shared))
}

/// What every member of a run of `ranks` ranks of `devices` devices each does under the team's
/// plan `shared` ([`team_member_plan`]; members numbered rank by rank, as the team numbers them).
pub fn member_plans(
    ctx: &GpuContext,
    g: &Geometry,
    params: &AdmmParams,
    shared: &MemoryPlan,
    (ranks, devices): (usize, usize),
) -> Result<Vec<MemberPlan>, PlanError> {
    let members = ranks.max(1) * devices.max(1);
    (0..members)
        .map(|member| {
            let portion = Portion { member, members };
            let p = team_member_plan(ctx, g, params, shared, portion)?;
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
    use crate::operator::LaminoOperator;
    use crate::plan::test_geometry as geometry;
    use crate::plan::{plan_on_paper, MemoryPlan};

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
        let single = plan_on_paper(&ctx, &g, &params, &caps, &one, GRIDDING).unwrap();
        assert_eq!(single.mode, Mode::Streaming);
        assert!(single.bytes_moved_per_iteration > 0);
        let as_one = Budgets::given(device * k, u64::MAX, None).for_max_buffer(buffer);
        let pooled = plan_on_paper(&ctx, &g, &params, &caps, &as_one, GRIDDING).unwrap();
        assert_eq!(pooled.mode, Mode::Streaming, "no whole array fits a buffer");
        for member in 0..k as usize {
            let portion = Portion {
                member,
                members: k as usize,
            };
            let m = plan_member(&ctx, &g, &params, &caps, &one, portion).unwrap();
            assert_eq!(m.mode, Mode::InCore, "{m:?}");
            assert_eq!(m.bytes_moved_per_iteration, 0, "{m:?}");
            assert!(m.device_bytes <= device, "{m:?}");
            assert_eq!(m.resident_arrays(), Array::BY_TRAFFIC.len());
        }
        // A member with too little memory for its shares streams them, moving its part only.
        let small = Budgets::given(need / 8, u64::MAX, None);
        let whole = plan_on_paper(&ctx, &g, &params, &caps, &small, GRIDDING).unwrap();
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

    /// Arrays that fit a device beside smaller chunk buffers than the largest the binding allows
    /// are planned in-core with those chunks, not streamed over the bus: at the least memory
    /// that is in-core, the chunks are smaller than with room to spare, and one byte less
    /// streams.
    #[test]
    fn arrays_that_fit_beside_smaller_chunks_stay_in_core_with_them() {
        let ctx = crate::gpu::test_context();
        let g = geometry(64);
        let params = AdmmParams::default();
        let caps = OperatorOptions::default();
        let plan = |device| {
            let budgets = Budgets::given(device, u64::MAX, None);
            plan_member(&ctx, &g, &params, &caps, &budgets, Portion::WHOLE).unwrap()
        };
        let roomy = plan(1 << 40);
        assert_eq!(roomy.mode, Mode::InCore);
        let low = crate::plan::least_in_core_bytes(|d| plan(d).mode == Mode::InCore);
        let tight = plan(low);
        assert_eq!(tight.mode, Mode::InCore);
        assert_eq!(tight.bytes_moved_per_iteration, 0);
        assert!(tight.device_bytes < roomy.device_bytes, "{tight:?}");
        let (t, r) = (tight.chunks, roomy.chunks);
        assert!(t.0 < r.0 && t.1 < r.1 && t.2 < r.2, "{t:?} {r:?}");
        assert_eq!(plan(low - 1).mode, Mode::Streaming);
    }

    /// A run's members take the team's plan (its chunks): a member whose homes fit its device
    /// beside what that plan holds there is in-core with exactly its homes on the device, a
    /// member with less memory streams its share as the team's plan does; members are
    /// numbered rank by rank.
    #[test]
    fn a_runs_members_are_in_core_where_their_homes_fit_beside_the_teams_plan() {
        let ctx = crate::gpu::test_context();
        let g = geometry(32);
        let params = AdmmParams::default();
        let caps = OperatorOptions::default();
        let need = MemoryPlan::in_core(&ctx, &g, &params, &caps)
            .unwrap()
            .device_bytes;
        // The largest budget below the whole plan at which the team's plan streams every array
        // while each of the four members' homes fit beside it (the members hold a quarter).
        let (budget, shared, plans) = (1..16u64)
            .rev()
            .map(|sixteenths| need * sixteenths / 16)
            .find_map(|budget| {
                let budgets = Budgets::given(budget, u64::MAX / 4, None);
                let shared = crate::plan::plan_shared(&ctx, &g, &params, &caps, &budgets).ok()?;
                let plans = member_plans(&ctx, &g, &params, &shared, (2, 2)).ok()?;
                (shared.resident_arrays() == 0 && plans.iter().all(|m| m.mode == Mode::InCore))
                    .then_some((budget, shared, plans))
            })
            .expect("a budget at which the team streams and its members are in-core");
        let ids: Vec<_> = plans.iter().map(|m| (m.rank, m.device)).collect();
        assert_eq!(ids, [(0, 0), (0, 1), (1, 0), (1, 1)]);
        let (chunks, rows) = (shared.chunks, shared.chunks.1);
        // Resident, the team's plan holds every detector row's U2 tables, a member its own.
        assert_eq!(shared.u2_tables, Residency::Device);
        let row = LaminoOperator::u2_table_bytes(&g) / g.deth as u64;
        for m in &plans {
            let homes: u64 = Array::BY_TRAFFIC
                .iter()
                .map(|&a| m.portion.home_bytes(a, &g, chunks))
                .sum();
            let held = m.portion.home(Array::Spectrum, &g, chunks).len();
            let others = (g.deth - held) as u64 * row;
            assert_eq!(m.mode, Mode::InCore, "{m:?}");
            assert_eq!(m.share_bytes, homes);
            assert_eq!(m.device_bytes, shared.device_bytes - others + homes);
            assert!(m.device_bytes <= budget);
        }
        // The homes tile every array, and the spectrum's follow U2's chunks.
        for a in Array::BY_TRAFFIC {
            let mut next = 0;
            for m in &plans {
                let home = m.portion.home(a, &g, chunks);
                assert_eq!(home.start, next, "{a:?}");
                next = home.end;
            }
            assert_eq!(next, a.layout(&g).planes, "{a:?}");
        }
        assert_eq!(
            plans[1].portion.home(Array::Spectrum, &g, chunks).start % rows,
            0
        );
        // One member's homes do not fit beside the team's plan: it streams.
        let one = member_plans(&ctx, &g, &params, &shared, (1, 1)).unwrap();
        assert_eq!(one[0].mode, Mode::Streaming, "{:?}", one[0]);
        assert_eq!(one[0].resident_arrays, 0);
        assert!(one[0].bytes_moved_per_iteration > 0);
    }

    /// Where one device cannot hold everything, the team's chunks are those that let the
    /// fewest members keep their homes on their devices: at 1024^3 on 40 GiB GPUs with 2047 MiB
    /// bindings (planned on paper), one device's streaming chunks and staging buffers leave no
    /// room for a member of 4's homes, while the team's chunks do, and the members of 16 and
    /// 64 too; members of 2 stream, as their own plans do.
    #[test]
    fn team_chunks_leave_room_for_the_homes_from_the_fewest_members_on() {
        let ctx = crate::gpu::test_context().modelling_max_binding_bytes(2047 << 20);
        let g = geometry(1024);
        let params = AdmmParams::default();
        let caps = OperatorOptions::default();
        let budgets = Budgets::given(40 << 30, 1 << 50, None).for_max_buffer(40 << 30);
        let shared = crate::plan::plan_shared(&ctx, &g, &params, &caps, &budgets).unwrap();
        let one_device = plan_streaming(
            &ctx,
            &g,
            &params,
            &caps,
            &budgets,
            (GRIDDING, (true, Portion::WHOLE)),
        )
        .unwrap();
        assert!(shared.chunks.1 < one_device.chunks.1, "{:?}", shared.chunks);
        let first = |plan: &MemoryPlan, members| {
            team_member_plan(&ctx, &g, &params, plan, Portion { member: 0, members })
                .unwrap()
                .mode
        };
        assert_eq!(first(&one_device, 4), Mode::Streaming);
        for (members, mode) in [
            (2, Mode::Streaming),
            (4, Mode::InCore),
            (16, Mode::InCore),
            (64, Mode::InCore),
        ] {
            assert_eq!(first(&shared, members), mode, "{members} members");
            let own = plan_member(
                &ctx,
                &g,
                &params,
                &caps,
                &budgets,
                Portion { member: 0, members },
            );
            assert_eq!(own.unwrap().mode, mode, "{members} members' own plans");
        }
    }
}
