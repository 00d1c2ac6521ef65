//! The `warmstart` command: a thin shell over the library's CLI.

fn main() {
    std::process::exit(warmstart::cli::main());
}
