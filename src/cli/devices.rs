//! `lamino devices`: every adapter wgpu finds, with the facts that decide whether lamino can use it.

use crate::gpu::{list_adapters, Backend};

use super::CliResult;

pub fn run(json: bool, backend: Option<Backend>) -> CliResult {
    let adapters = list_adapters(backend);
    if adapters.is_empty() {
        match backend {
            Some(b) => println!("no {b:?} adapters found (is its driver installed?)"),
            None => {
                println!("no GPU adapters found (is a Vulkan, Metal, DX12 or GL driver installed?)")
            }
        }
    }
    for a in adapters {
        if json {
            println!("{}", serde_json::to_string(&a)?);
        } else {
            println!(
                "[{}] {}\n    backend {}, type {}{}, driver {} {}\n    max buffer {} MiB, max storage binding {} MiB, workgroup memory {} KiB, {} invocations/workgroup, timestamps {}",
                a.index,
                a.name,
                a.backend,
                a.device_type,
                if a.software { " (software: needs --allow-software-gpu)" } else { "" },
                a.driver,
                a.driver_info,
                a.max_buffer_bytes >> 20,
                a.max_storage_binding_bytes >> 20,
                a.max_workgroup_storage_bytes >> 10,
                a.max_invocations_per_workgroup,
                a.timestamps
            );
        }
    }
    Ok(())
}
