//! `harness-probe`: see the library's docs.

fn main() -> std::process::ExitCode {
    harness_probe::cli::main()
}
