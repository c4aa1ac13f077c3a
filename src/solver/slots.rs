//! The numbered slots of the solver's [`Scalars`](crate::array::Scalars): the coefficients
//! kernels read and the reduction results the host reads back. The iteration, its call sites and
//! the scalar kernels name them alike, so they are declared once here.

/// Coefficient slots: the host writes the penalty's once per outer iteration, the scalar kernels
/// the CG step's.
pub(super) mod slot {
    use crate::array::Slot;
    pub const RHO: Slot = Slot(1);
    pub const NEG_RHO: Slot = Slot(2);
    pub const INV_RHO: Slot = Slot(3);
    pub const NEG_INV_RHO: Slot = Slot(4);
    pub const ALPHA_OVER_RHO: Slot = Slot(5);
    pub const INV_N: Slot = Slot(6);
    pub const STEP: Slot = Slot(7);
    pub const NEG_STEP: Slot = Slot(8);
    pub const NEG_STEP_RHO: Slot = Slot(9);
    pub const BETA: Slot = Slot(10);
    pub const GAMMA: Slot = Slot(11);
    pub const COUNT: usize = 12;
}

/// Reduction-result slots, read together once per outer iteration.
pub(super) mod sum {
    use crate::array::SumSlot;
    pub const RR: SumSlot = SumSlot(0);
    pub const RR_NEW: SumSlot = SumSlot(1);
    pub const APAP: SumSlot = SumSlot(2);
    pub const GPGP: SumSlot = SumSlot(3);
    pub const P_RPREV: SumSlot = SumSlot(4);
    pub const P_R: SumSlot = SumSlot(5);
    pub const PRIMAL: SumSlot = SumSlot(6);
    pub const DUAL: SumSlot = SumSlot(7);
    pub const DATA: SumSlot = SumSlot(8);
    pub const ISO: SumSlot = SumSlot(9);
    pub const LAMBDA_DOT: SumSlot = SumSlot(10);
    pub const CHANGE: SumSlot = SumSlot(11);
    pub const UU: SumSlot = SumSlot(12);
    pub const GUGU: SumSlot = SumSlot(13);
    pub const PSIPSI: SumSlot = SumSlot(14);
    pub const LAMBDA: SumSlot = SumSlot(15);
    pub const COUNT: usize = 16;
}
