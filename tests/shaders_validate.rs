//! Every composed WGSL shader parses and validates with naga, without a GPU, and its resource
//! variables match the binding layout the Rust side declares for it (`Shader::layout`).

use lamino::gpu::BindingKind;
use lamino::shaders::{Shader, ALL};
use naga::{AddressSpace, StorageAccess};

fn parse_and_validate(shader: &Shader) -> Result<naga::Module, String> {
    let source = shader.source();
    let module = naga::front::wgsl::parse_str(&source)
        .map_err(|e| format!("{}: {}", shader.name, e.emit_to_string(&source)))?;
    let mut validator = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    );
    validator
        .validate(&module)
        .map_err(|e| format!("{}: {}", shader.name, e.emit_to_string(&source)))?;
    Ok(module)
}

#[test]
fn every_shader_parses_and_validates() {
    let failures: Vec<String> = ALL
        .iter()
        .filter_map(|shader| parse_and_validate(shader).err())
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(ALL.len() >= 4);
}

/// What a WGSL resource variable is, in the Rust side's terms; `None` for anything a buffer
/// binding cannot be (textures, samplers, private variables).
fn kind_of(space: AddressSpace) -> Option<BindingKind> {
    match space {
        AddressSpace::Storage { access } if access.contains(StorageAccess::STORE) => {
            Some(BindingKind::StorageReadWrite)
        }
        AddressSpace::Storage { .. } => Some(BindingKind::StorageRead),
        AddressSpace::Uniform => Some(BindingKind::Uniform),
        _ => None,
    }
}

/// The mismatches between `module`'s resource variables and `layout`: each declared binding must
/// exist in group 0 with the declared kind, and every resource variable must be declared.
fn layout_mismatches(module: &naga::Module, layout: &[BindingKind]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut found = vec![false; layout.len()];
    for (_, var) in module.global_variables.iter() {
        let Some(binding) = &var.binding else {
            continue;
        };
        let name = var.name.as_deref().unwrap_or("?");
        let at = format!(
            "`{name}` (@group({}) @binding({}))",
            binding.group, binding.binding
        );
        let kind = kind_of(var.space);
        if binding.group != 0 {
            problems.push(format!("{at}: only group 0 is bound"));
        } else if let Some(declared) = layout.get(binding.binding as usize) {
            if found[binding.binding as usize] {
                problems.push(format!("{at}: a second variable at this binding"));
            }
            found[binding.binding as usize] = true;
            if kind != Some(*declared) {
                problems.push(format!(
                    "{at} is {:?} in WGSL but declared {declared:?}",
                    var.space
                ));
            }
        } else {
            problems.push(format!(
                "{at}: not in the declared layout of {} bindings",
                layout.len()
            ));
        }
    }
    for (i, declared) in layout.iter().enumerate() {
        if !found[i] {
            problems.push(format!(
                "binding {i} ({declared:?}) is declared but not in the WGSL"
            ));
        }
    }
    problems
}

/// What is wrong with `shader`: its validation error, or each binding that differs from its
/// declared layout.
fn layout_failures(shader: &Shader) -> Vec<String> {
    match parse_and_validate(shader) {
        Ok(module) => layout_mismatches(&module, shader.layout)
            .into_iter()
            .map(|p| format!("{}: {p}", shader.name))
            .collect(),
        Err(e) => vec![e],
    }
}

/// Every shader's bindings are checked against its declared layout.
#[test]
fn every_declared_layout_matches_its_shader() {
    let failures: Vec<String> = ALL.iter().flat_map(|s| layout_failures(s)).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn layout_mismatches_are_found() {
    let module = naga::front::wgsl::parse_str(
        "@group(0) @binding(0) var<storage, read> a: array<f32>;
         @group(0) @binding(1) var<storage, read_write> b: array<f32>;
         @group(0) @binding(2) var<uniform> c: vec4<u32>;
         @compute @workgroup_size(1) fn main() { b[0] = a[0] + f32(c.x); }",
    )
    .unwrap();
    use BindingKind::{StorageRead as R, StorageReadWrite as RW, Uniform as U};
    assert!(layout_mismatches(&module, &[R, RW, U]).is_empty());
    for (layout, needle) in [
        (&[RW, RW, U][..], "declared StorageReadWrite"),
        (
            &[R, RW, U, U][..],
            "binding 3 (Uniform) is declared but not in the WGSL",
        ),
        (&[R, RW][..], "not in the declared layout"),
        (&[R, R, U][..], "declared StorageRead"),
    ] {
        let problems = layout_mismatches(&module, layout);
        assert!(
            problems.iter().any(|p| p.contains(needle)),
            "{layout:?}: {problems:?}"
        );
    }
}

/// The two-level FFT passes are composed at run time from generated rows: every split of a
/// sub-length up to 8192, with both largest radices, validates and binds the declared layout.
#[test]
fn every_two_level_pass_validates_and_binds_its_layout() {
    use lamino::fft::two_level::{shader, split};
    let mut failures = Vec::new();
    let splits: Vec<(usize, usize)> = (2..=8192).filter_map(split).collect();
    for &(a, b) in &splits {
        for max_radix in [8, 16] {
            failures.extend(layout_failures(shader(a, b, max_radix)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        splits.contains(&(64, 64)) && splits.len() > 100,
        "{}",
        splits.len()
    );
}
