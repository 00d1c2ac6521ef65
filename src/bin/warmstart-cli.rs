//! `warmstart-cli`: the full command line. Users run `warmstart`, whose front launches a
//! plain `run` itself and execs this binary for everything else (see `cli::front`).

fn main() {
    std::process::exit(warmstart::cli::main());
}
