//! The `lamino` command line; each command lives in its own module under `src/cli/`.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
