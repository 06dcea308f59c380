//! The `lockrun` binary: parse and dispatch; everything else is in the library.

fn main() -> std::process::ExitCode {
    lockrun::commands::main()
}
