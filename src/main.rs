//! The `warmstart` command: the lean front (see `cli::front`), which launches plain `run`s
//! itself and hands every other command line to `warmstart-cli`.

fn main() {
    std::process::exit(warmstart::cli::front::main());
}
