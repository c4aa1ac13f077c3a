//! Every compute entry point of every shader, and every pipeline a run compiles (the kernels a
//! small reconstruction, an axis search and a sweep of FFT lengths and strategies ask the device
//! for, with the pipeline constants they set), translates, with the translator wgpu runs on each
//! platform (naga), to what each backend's driver takes: Metal Shading Language 2.4 (Metal),
//! HLSL shader model 5.1 (DX12, the oldest model its compilers accept), GLSL ES 3.10 compute
//! (OpenGL ES / EGL, the first version with compute) and SPIR-V (Vulkan), after its pipeline
//! constants are fixed as a pipeline fixes them (the run's own, or WGSL's defaults). Where the validators of the Khronos group are
//! installed (`spirv-val` from `spirv-tools`, `glslangValidator` from `glslang-tools`; CI installs
//! them and requires them), the SPIR-V and GLSL are checked by them too: naga's writers refuse
//! what a backend cannot express, the validators what a driver would refuse. Metal's and DX12's
//! own compilers do not run on Linux; their translations are checked by naga alone.

use std::path::Path;
use std::process::Command;

mod common;

use lamino::gpu::KernelSpec;
use lamino::shaders::{Shader, ALL};
use naga::back::{glsl, hlsl, msl, spv};
use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};
use naga::{Module, ShaderStage};

/// The pipeline constants without a default in WGSL, with a value lamino gives them: the
/// gridding kernel's polynomial length at the default accuracy.
fn required_constants() -> Vec<(&'static str, f64)> {
    let axis = lamino::operator::GriddingAxis::new(64, lamino::geometry::DEFAULT_EPS);
    vec![("TAP_TERMS", axis.tap_polynomials().terms as f64)]
}

fn validate(module: &Module) -> Result<ModuleInfo, String> {
    Validator::new(ValidationFlags::all(), Capabilities::empty())
        .validate(module)
        .map_err(|e| format!("{e:?}"))
}

/// Which validators run: `None` where one is not installed (CI requires both).
struct Validators {
    spirv: bool,
    glsl: bool,
}

impl Validators {
    fn find() -> Self {
        let found = |tool: &str| {
            Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        };
        let v = Self {
            spirv: found("spirv-val"),
            glsl: found("glslangValidator"),
        };
        if std::env::var_os("CI").is_some() {
            assert!(
                v.spirv && v.glsl,
                "CI runs the shaders through spirv-val and glslangValidator: install the \
                 packages spirv-tools and glslang-tools"
            );
        }
        v
    }
}

/// Runs `tool` on `args`; its complaint if it refuses.
fn run(tool: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(tool)
        .args(args)
        .output()
        .map_err(|e| format!("{tool}: {e}"))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{tool} refused it:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

/// What is wrong with the translations of the entry points of the shader `name`, of WGSL
/// `source` (only `entry` where given, with the pipeline constants `set` on top of WGSL's
/// defaults), one line each; files for the external validators go to `dir`.
fn translation_failures(
    name: &str,
    source: &str,
    (entry, set): (Option<&str>, &[(&str, f64)]),
    validators: &Validators,
    dir: &Path,
) -> Vec<String> {
    let module = match naga::front::wgsl::parse_str(source) {
        Ok(module) => module,
        Err(e) => return vec![format!("{name}: {}", e.emit_to_string(source))],
    };
    let info = match validate(&module) {
        Ok(info) => info,
        Err(e) => return vec![format!("{name}: {e}")],
    };
    let mut constants = naga::back::PipelineConstants::default();
    let required = required_constants();
    let given = |c: &str| set.iter().chain(&required).find(|(n, _)| *n == c).copied();
    for (_, o) in module.overrides.iter() {
        let constant = o.name.clone().unwrap_or_default();
        match given(&constant) {
            Some((_, value)) => {
                constants.insert(constant, value);
            }
            None if o.init.is_none() => {
                return vec![format!(
                    "{name}: override {constant} has no default: give this test the value \
                     lamino sets"
                )]
            }
            None => {}
        }
    }
    let mut failures = Vec::new();
    let entries = module.entry_points.iter().map(|e| e.name.clone());
    for entry in entries.filter(|e| entry.is_none_or(|only| only == e)) {
        let at = format!("{name} `{entry}`");
        let fixed = naga::back::pipeline_constants::process_overrides(
            &module,
            &info,
            Some((ShaderStage::Compute, &entry)),
            &constants,
        );
        let (module, info) = match fixed {
            Ok(fixed) => fixed,
            Err(e) => {
                failures.push(format!("{at}: pipeline constants: {e:?}"));
                continue;
            }
        };
        let point = Entry {
            module: &module,
            info: &info,
            name: &entry,
        };
        let checks = Checks { validators, dir };
        let results: [(&str, Result<(), String>); 4] = [
            ("MSL", point.msl()),
            ("HLSL", point.hlsl()),
            ("GLSL", point.glsl(&checks)),
            ("SPIR-V", point.spirv(&checks)),
        ];
        for (backend, result) in results {
            if let Err(e) = result {
                failures.push(format!("{at} to {backend}: {e}"));
            }
        }
    }
    failures
}

/// One entry point of a module whose pipeline constants are fixed.
struct Entry<'a> {
    module: &'a Module,
    info: &'a ModuleInfo,
    name: &'a str,
}

/// Where the external validators' files go, and which validators run.
struct Checks<'a> {
    validators: &'a Validators,
    dir: &'a Path,
}

impl Checks<'_> {
    /// `contents` written to `file` and given to `tool` with `args` before the file, if `tool`
    /// runs here.
    fn validate(
        &self,
        tool: &str,
        runs: bool,
        file: &str,
        contents: &[u8],
        args: &[&str],
    ) -> Result<(), String> {
        if !runs {
            return Ok(());
        }
        let path = self.dir.join(file);
        std::fs::write(&path, contents).map_err(|e| e.to_string())?;
        let mut args = args.to_vec();
        args.push(path.to_str().unwrap());
        run(tool, &args)
    }
}

impl Entry<'_> {
    fn msl(&self) -> Result<(), String> {
        let options = msl::Options {
            lang_version: (2, 4),
            ..msl::Options::default()
        };
        let pipeline = msl::PipelineOptions {
            entry_point: Some((ShaderStage::Compute, self.name.to_string())),
            ..msl::PipelineOptions::default()
        };
        msl::write_string(self.module, self.info, &options, &pipeline)
            .map(drop)
            .map_err(|e| format!("{e:?}"))
    }

    fn hlsl(&self) -> Result<(), String> {
        let options = hlsl::Options {
            shader_model: hlsl::ShaderModel::V5_1,
            ..hlsl::Options::default()
        };
        let pipeline = hlsl::PipelineOptions::default();
        let mut out = String::new();
        hlsl::Writer::new(&mut out, &options, &pipeline)
            .write(self.module, self.info, None)
            .map(drop)
            .map_err(|e| format!("{e:?}"))
    }

    fn glsl(&self, checks: &Checks) -> Result<(), String> {
        let options = glsl::Options {
            version: glsl::Version::Embedded {
                version: 310,
                is_webgl: false,
            },
            ..glsl::Options::default()
        };
        let pipeline = glsl::PipelineOptions {
            shader_stage: ShaderStage::Compute,
            entry_point: self.name.to_string(),
            multiview: None,
        };
        let mut out = String::new();
        glsl::Writer::new(
            &mut out,
            self.module,
            self.info,
            &options,
            &pipeline,
            naga::proc::BoundsCheckPolicies::default(),
        )
        .and_then(|mut w| w.write())
        .map_err(|e| format!("{e:?}"))?;
        let file = format!("{}.comp", self.name);
        checks.validate(
            "glslangValidator",
            checks.validators.glsl,
            &file,
            out.as_bytes(),
            &[],
        )
    }

    fn spirv(&self, checks: &Checks) -> Result<(), String> {
        let pipeline = spv::PipelineOptions {
            shader_stage: ShaderStage::Compute,
            entry_point: self.name.to_string(),
        };
        let words = spv::write_vec(
            self.module,
            self.info,
            &spv::Options::default(),
            Some(&pipeline),
        )
        .map_err(|e| format!("{e:?}"))?;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let file = format!("{}.spv", self.name);
        let args = ["--target-env", "vulkan1.1"];
        checks.validate("spirv-val", checks.validators.spirv, &file, &bytes, &args)
    }
}

#[test]
fn every_entry_point_translates_for_every_backend() {
    let validators = Validators::find();
    let scratch = tempfile::tempdir().unwrap();
    // The two-level FFT passes are composed at run time: a square split and a long one, with
    // both largest radices.
    use lamino::fft::two_level::{shader, split};
    let passes: Vec<&Shader> = [64 * 64, 8 * 1024]
        .into_iter()
        .filter_map(split)
        .flat_map(|(a, b)| [shader(a, b, 8), shader(a, b, 16)])
        .collect();
    assert_eq!(passes.len(), 4, "both lengths split in two levels");
    let shaders: Vec<&Shader> = ALL.iter().copied().chain(passes).collect();
    let failures: Vec<String> = shaders
        .iter()
        .flat_map(|s| {
            let every_entry = (None, &[][..]);
            translation_failures(
                s.name,
                &s.source(),
                every_entry,
                &validators,
                scratch.path(),
            )
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let entry_points: usize = shaders
        .iter()
        .map(|s| {
            let module = naga::front::wgsl::parse_str(&s.source()).unwrap();
            module.entry_points.len()
        })
        .sum();
    eprintln!(
        "{entry_points} entry points of {} shaders translated to MSL, HLSL, GLSL and SPIR-V \
         (glslangValidator: {}, spirv-val: {})",
        shaders.len(),
        if validators.glsl {
            "passed"
        } else {
            "not installed"
        },
        if validators.spirv {
            "passed"
        } else {
            "not installed"
        },
    );
    assert!(entry_points >= shaders.len(), "{entry_points}");
}

/// The kernels a run compiles on the software adapter: a reconstruction of a 16^3 chip with its
/// axis searched, the FFT of a sweep of lengths (radices 2 to 7, a prime for Bluestein, one past
/// a workgroup's memory) with each strategy in both directions, and the specialised 2D and 3D
/// transforms the operator uses.
fn kernels_a_run_compiles() -> Vec<KernelSpec> {
    use lamino::fft::{Direction, FftDescriptor, FftPlan, FftPlan1d, Normalization, Strategy};
    use lamino::recon::{AxisStep, Job, JobInput, Preparation};

    let ctx = common::new_context();
    let scan = common::chip_projections(16, 1);
    let job = Job {
        input: JobInput::Loaded {
            loaded: lamino::recon::input::LoadedProjections::given(scan, "a test", "a test"),
            binning: 1,
        },
        preparation: Preparation {
            axis: AxisStep::Search,
            ..Preparation::default()
        },
    };
    lamino::Reconstructor::new(&ctx)
        .params(lamino::AdmmParams::exactly(1))
        .run_job(job, &mut |_| Ok(()))
        .unwrap();
    let data = ctx.upload("sweep", &vec![[0.0f32; 2]; 1 << 14]).unwrap();
    for len in [2, 3, 5, 7, 12, 60, 64, 97, 128, 243, 1000, 4096] {
        for direction in [Direction::Forward, Direction::Inverse] {
            for strategy in [Strategy::Auto, Strategy::Fused, Strategy::MultiPass] {
                let desc = FftDescriptor::contiguous(len, 2, direction);
                FftPlan1d::with_strategy(&ctx, desc, &data, strategy).unwrap();
            }
            for shape in [&[6, 16, 24][..], &[8, 12, 10]] {
                let (axes, norm) = (shape.len() - 1, Normalization::None);
                FftPlan::specialized(&ctx, shape, axes, direction, norm, &data).unwrap();
                FftPlan::new(&ctx, shape, shape.len(), direction, norm, &data).unwrap();
            }
        }
    }
    ctx.compiled_kernels()
}

#[test]
fn every_pipeline_a_run_compiles_translates_for_every_backend() {
    let validators = Validators::find();
    let scratch = tempfile::tempdir().unwrap();
    let kernels = kernels_a_run_compiles();
    let failures: Vec<String> = kernels
        .iter()
        .flat_map(|k| {
            let run = (Some(k.entry), &k.overrides[..]);
            let source = k.shader.source();
            translation_failures(k.shader.name, &source, run, &validators, scratch.path())
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let shaders: std::collections::HashSet<&str> = kernels.iter().map(|k| k.shader.name).collect();
    eprintln!(
        "{} pipelines of {} shaders a run compiled translated to MSL, HLSL, GLSL and SPIR-V",
        kernels.len(),
        shaders.len()
    );
    // The run reached the operator's gridding, the solver's vectors, the axis search's
    // backprojection and the FFT's passes.
    for shader in [
        "operator/usfft1d",
        "operator/usfft2d",
        "solver/vector",
        "preprocess/backproject",
    ] {
        assert!(shaders.contains(shader), "{shader}: {shaders:?}");
    }
    assert!(shaders.iter().any(|s| s.starts_with("fft/")), "{shaders:?}");
}

/// The checks can fail: a pipeline constant the test cannot fix, and (where they are
/// installed) what the validators refuse.
#[test]
fn the_checks_refuse_what_they_cannot_take() {
    let validators = Validators::find();
    let scratch = tempfile::tempdir().unwrap();
    let failures = translation_failures(
        "unknown",
        "override UNKNOWN: u32;\n@compute @workgroup_size(UNKNOWN) fn main() {}",
        (None, &[]),
        &validators,
        scratch.path(),
    );
    assert!(
        failures.len() == 1 && failures[0].contains("UNKNOWN has no default"),
        "{failures:?}"
    );
    let checks = Checks {
        validators: &validators,
        dir: scratch.path(),
    };
    let bad_glsl = b"#version 310 es\nvoid main() { undefined_call(); }\n";
    let refused = checks.validate(
        "glslangValidator",
        validators.glsl,
        "bad.comp",
        bad_glsl,
        &[],
    );
    assert!(refused.is_err() || !validators.glsl);
    // A SPIR-V header with nothing after it: no capability, no memory model.
    let header = [0x0723_0203_u32, 0x0001_0000, 0, 1, 0];
    let bad_spirv: Vec<u8> = header.iter().flat_map(|w| w.to_le_bytes()).collect();
    let refused = checks.validate("spirv-val", validators.spirv, "bad.spv", &bad_spirv, &[]);
    assert!(refused.is_err() || !validators.spirv);
}
