//! The `lamino` command line: [`lamino::run_command_line`] (each command lives in its own module
//! under `src/cli/`, inside the library, where the benchmark drivers and the CPU references its
//! `bench` and `selftest` commands run are, which the library does not make public).

fn main() -> std::process::ExitCode {
    lamino::run_command_line()
}
