//! `warmstart-bench`: the same command line as `warmstart`, plus the benchmark harness that
//! `warmstart bench` delegates to (kept out of the launcher binary; see cli::main).

fn main() {
    std::process::exit(warmstart::cli::bench_binary_main());
}
