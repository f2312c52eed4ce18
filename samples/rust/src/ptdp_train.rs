//! ptdp-train in Rust: the library's training loop, the one every front end shares, so the
//! same flags print the same log lines and write the same checkpoints as the C tool.
//!
//!     mpirun -np 4 ptdp_train --tensor-model-parallel-size 2 --num-layers 4 ...
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let code = match ptdp::train_main(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ptdp-train: {e}");
            1
        }
    };
    std::process::exit(code);
}
