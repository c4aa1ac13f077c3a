//! Every composed WGSL shader parses and validates with naga, without a GPU.

#[test]
fn every_shader_parses_and_validates() {
    let mut failures = Vec::new();
    for shader in lamino::shaders::ALL {
        let source = shader.source();
        let module = match naga::front::wgsl::parse_str(&source) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("{}: {}", shader.name, e.emit_to_string(&source)));
                continue;
            }
        };
        let mut validator = naga::valid::Validator::new(
            naga::valid::ValidationFlags::all(),
            naga::valid::Capabilities::empty(),
        );
        if let Err(e) = validator.validate(&module) {
            failures.push(format!("{}: {}", shader.name, e.emit_to_string(&source)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(lamino::shaders::ALL.len() >= 4);
}
