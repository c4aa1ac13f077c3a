// The three orthogonal slices of a volume on the device, side by side in one buffer of 32-bit
// words that an application copies into its textures (src/gpu/slices.rs): xy at z (rows y,
// columns x), then xz at y (rows z, columns x), then yz at x (rows z, columns y), every row
// `pitch` words long (a multiple of 64, wgpu's 256-byte row alignment of buffer-to-texture
// copies; the columns beyond a slice's width are 0). Mode 0 writes grey levels as RGBA8
// (round((v - lo) * scale), ties to even, clamped to 0..255; non-finite values magenta, as the
// CLI's previews draw them), mode 1 the values' bits.

struct SliceParams {
    // n0, n1, n2 of the volume the buffer holds; the row pitch of the output in words.
    padded: vec4<u32>,
    // The first z, y, x of the shown volume inside the buffer's; 1 where the buffer stores its
    // first two axes swapped, (n1, n0, n2) (y slowest), 0 where (n0, n1, n2).
    origin: vec4<u32>,
    // n0, n1, n2 of the shown volume; the output's words.
    shape: vec4<u32>,
    // The z, y, x of the slices; the mode.
    at: vec4<u32>,
    // lo, 255 / (hi - lo); unused, unused.
    window: vec4<f32>,
}

@group(0) @binding(0) var<storage, read> volume: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> p: SliceParams;

override WORKGROUP: u32 = 256u;

const MAGENTA: u32 = 0xffff00ffu;

fn grey(v: f32) -> u32 {
    // Non-finite by its exponent bits: a comparison `v != v` may be folded away by a compiler.
    if ((bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u) {
        return MAGENTA;
    }
    let level = u32(clamp(round((v - p.window.x) * p.window.y), 0.0, 255.0));
    return level | (level << 8u) | (level << 16u) | (255u << 24u);
}

@compute @workgroup_size(WORKGROUP)
fn slices(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = (wid.x + wid.y * groups.x) * WORKGROUP + lid;
    if (g >= p.shape.w) {
        return;
    }
    let pitch = p.padded.w;
    let row = g / pitch;
    let col = g % pitch;
    var z = p.at.x;
    var y = p.at.y;
    var x = p.at.z;
    var width = p.shape.z;
    if (row < p.shape.y) {
        y = row;
        x = col;
    } else if (row < p.shape.y + p.shape.x) {
        z = row - p.shape.y;
        x = col;
    } else {
        z = row - p.shape.y - p.shape.x;
        y = col;
        width = p.shape.y;
    }
    if (col >= width) {
        out[g] = 0u;
        return;
    }
    var i = ((p.origin.x + z) * p.padded.y + p.origin.y + y) * p.padded.z + p.origin.z + x;
    if (p.origin.w == 1u) {
        i = ((p.origin.y + y) * p.padded.x + p.origin.x + z) * p.padded.z + p.origin.z + x;
    }
    let v = volume[i];
    if (p.at.w == 1u) {
        out[g] = bitcast<u32>(v);
    } else {
        out[g] = grey(v);
    }
}
