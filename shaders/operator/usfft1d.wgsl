// Stage U1: 1D unequally spaced FFT along z for a chunk of (y, x) columns, gridding (GriddingAxis)
// on the oversampled grid of length 2n indexed modulo 2n (no padding, no fftshift passes).
// Chunk-local layouts, `columns` = chunk_y * n2 fastest:
//   col  [z][c]  (n, columns)       the volume's columns
//   grid [p][c]  (2n, columns)      the oversampled spectrum (FFT along p in between)
//   rows [k][c]  (deth, columns)    values at the detector-row frequencies z_k
// Forward: divker -> FFT (e^-) -> gather. Adjoint: spread (as a gather over a per-cell row list)
// -> FFT (e^+) -> divker_adjoint. Tap weights come from host tables shared by both directions.

struct U1Params {
    n: u32,
    grid_len: u32,
    deth: u32,
    columns: u32,
    taps: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<storage, read_write> col: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read_write> grid: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> rows: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read> deconv: array<f32>;
// Per row k and tap i: (grid cell, bitcast weight).
@group(0) @binding(4) var<storage, read> taps: array<vec2<u32>>;
@group(0) @binding(5) var<storage, read> cell_start: array<u32>;
// Per grid cell, in increasing row order: (row k, bitcast weight).
@group(0) @binding(6) var<storage, read> cell_entries: array<vec2<u32>>;
@group(0) @binding(7) var<uniform> p: U1Params;

override WORKGROUP: u32 = 64u;

fn thread_id(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return (wid.x + wid.y * groups.x) * WORKGROUP + lid;
}

@compute @workgroup_size(WORKGROUP)
fn u1_divker(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = thread_id(wid, groups, lid);
    if (g >= p.grid_len * p.columns) {
        return;
    }
    let cell = g / p.columns;
    let c = g % p.columns;
    let half = p.n / 2u;
    // Centred index j' sits at cell j' mod 2n; cells between n/2 and 2n - n/2 are zero padding.
    var value = vec2<f32>(0.0, 0.0);
    if (cell < half) {
        value = col[(cell + half) * p.columns + c] * deconv[cell + half];
    } else if (cell >= p.grid_len - half) {
        let j = cell + half - p.grid_len;
        value = col[j * p.columns + c] * deconv[j];
    }
    grid[g] = value;
}

@compute @workgroup_size(WORKGROUP)
fn u1_gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = thread_id(wid, groups, lid);
    if (g >= p.deth * p.columns) {
        return;
    }
    let k = g / p.columns;
    let c = g % p.columns;
    var acc = vec2<f32>(0.0, 0.0);
    for (var i = 0u; i < p.taps; i++) {
        let tap = taps[k * p.taps + i];
        acc += bitcast<f32>(tap.y) * grid[tap.x * p.columns + c];
    }
    rows[g] = acc;
}

@compute @workgroup_size(WORKGROUP)
fn u1_spread(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = thread_id(wid, groups, lid);
    if (g >= p.grid_len * p.columns) {
        return;
    }
    let cell = g / p.columns;
    let c = g % p.columns;
    var acc = vec2<f32>(0.0, 0.0);
    for (var e = cell_start[cell]; e < cell_start[cell + 1u]; e++) {
        let entry = cell_entries[e];
        acc += bitcast<f32>(entry.y) * rows[entry.x * p.columns + c];
    }
    grid[g] = acc;
}

@compute @workgroup_size(WORKGROUP)
fn u1_divker_adjoint(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let g = thread_id(wid, groups, lid);
    if (g >= p.n * p.columns) {
        return;
    }
    let z = g / p.columns;
    let c = g % p.columns;
    let cell = (z + p.grid_len - p.n / 2u) % p.grid_len;
    col[g] = grid[cell * p.columns + c] * deconv[z];
}
