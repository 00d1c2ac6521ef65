//! `warmstart-cli`: the full command line. Users run `warmstart`, whose front execs this for
//! everything but a plain `run`, and starts it as the prefetcher of those (`attach`).

fn main() {
    std::process::exit(warmstart::cli::main());
}
