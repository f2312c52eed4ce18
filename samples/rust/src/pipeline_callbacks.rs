//! The pipeline scheduler driving a model of your own: ptdp runs the schedule (here ZB-H1,
//! which splits each backward into input- and weight-gradient steps), moves activations and
//! gradients between the pipeline ranks, and calls back into Rust for every compute step.
//!
//! The model is a chain of element-wise scalings, one weight vector per chunk; its output
//! should match `TARGET * x`. Run with one process, or as a real pipeline with
//! `mpirun -np 2 pipeline_callbacks` (one chunk per rank).
use ptdp::sys;
use ptdp::{Defaults, Groups, ParallelOptions, Runtime, RuntimeOptions, Schedule, Stages, Tensor};
use std::collections::HashMap;

const WIDTH: usize = 4;
const TARGET: [f32; WIDTH] = [0.5, 1.0, 1.5, 2.0];

/// This rank's chunks: their weights, gradients and what the backward steps need.
struct Chain {
    chunks: i32, // p * v chunks in the whole pipeline
    microbatches: i32,
    weights: HashMap<i32, [f32; WIDTH]>,          // chunk -> w
    grads: HashMap<i32, [f32; WIDTH]>,            // chunk -> dL/dw, summed over microbatches
    inputs: HashMap<(i32, i32), [f32; WIDTH]>,    // (chunk, mb) -> x, kept for dL/dw
    out_grads: HashMap<(i32, i32), [f32; WIDTH]>, // (chunk, mb) -> dL/dy, kept for dL/dw
    loss: f32,                                    // summed on the rank of the last chunk
}

fn values(t: &Tensor) -> ptdp::Result<[f32; WIDTH]> {
    let v = t.to_vec::<f32>()?;
    Ok([v[0], v[1], v[2], v[3]])
}

/// Microbatch mb's input to chunk 0.
fn data(mb: i32) -> [f32; WIDTH] {
    [1.0, -0.5, 0.25, 0.75].map(|x| x * (1.0 + mb as f32) / 2.0)
}

impl Stages for Chain {
    fn forward(&mut self, chunk: i32, mb: i32, input: Option<&Tensor>) -> ptdp::Result<Option<Tensor>> {
        let x = match input {
            Some(t) => values(t)?,
            None => data(mb), // chunk 0 reads its own data
        };
        let w = self.weights[&chunk];
        let y: [f32; WIDTH] = std::array::from_fn(|i| w[i] * x[i]);
        self.inputs.insert((chunk, mb), x);
        if chunk + 1 < self.chunks {
            return Ok(Some(Tensor::from_slice(&[WIDTH as i64], &y)?)); // the library owns it now
        }
        // The last chunk: squared error against TARGET * (chunk 0's input), mean over microbatches.
        let x0 = data(mb);
        let scale = 1.0 / (self.microbatches as f32 * WIDTH as f32);
        let mut dy = [0.0; WIDTH];
        for i in 0..WIDTH {
            let e = y[i] - TARGET[i] * x0[i];
            self.loss += 0.5 * e * e * scale;
            dy[i] = e * scale;
        }
        self.out_grads.insert((chunk, mb), dy);
        Ok(None)
    }

    fn backward_input(&mut self, chunk: i32, mb: i32, grad_output: Option<&Tensor>) -> ptdp::Result<Option<Tensor>> {
        let dy = match grad_output {
            Some(t) => values(t)?,
            None => self.out_grads[&(chunk, mb)], // the last chunk starts from its loss
        };
        self.out_grads.insert((chunk, mb), dy);
        if chunk == 0 {
            return Ok(None);
        }
        let w = self.weights[&chunk];
        let dx: [f32; WIDTH] = std::array::from_fn(|i| w[i] * dy[i]);
        Ok(Some(Tensor::from_slice(&[WIDTH as i64], &dx)?))
    }

    fn backward_weight(&mut self, chunk: i32, mb: i32) -> ptdp::Result<()> {
        let x = self.inputs.remove(&(chunk, mb)).expect("forward ran before W");
        let dy = self
            .out_grads
            .remove(&(chunk, mb))
            .expect("backward_input ran before W");
        let g = self.grads.get_mut(&chunk).unwrap();
        for i in 0..WIDTH {
            g[i] += x[i] * dy[i];
        }
        Ok(())
    }
}

fn main() -> ptdp::Result<()> {
    // Under mpirun the runtime spans MPI's world; alone, a world of one.
    let runtime = Runtime::new(&RuntimeOptions::defaults())?;
    let (rank, world) = runtime.world()?;
    let mut layout = ParallelOptions::defaults();
    layout.pipeline_model_parallel_size = world; // every rank is one pipeline stage
    let groups = Groups::new(&runtime, &layout)?;
    let stage = groups.rank(sys::PTDP_GROUP_PIPELINE)?;

    let (p, m) = (world, 2 * world);
    let schedule = Schedule::new(sys::PTDP_SCHEDULE_ZB_H1, p, m, 1)?;
    let mut chain = Chain {
        chunks: p,
        microbatches: m,
        weights: HashMap::from([(stage, [1.0; WIDTH])]),
        grads: HashMap::from([(stage, [0.0; WIDTH])]),
        inputs: HashMap::new(),
        out_grads: HashMap::new(),
        loss: 0.0,
    };

    let mut first = 0.0;
    let mut last = 0.0;
    for step in 0..60 {
        chain.loss = 0.0;
        ptdp::pipeline_run(&groups, &schedule, &mut chain, &[WIDTH as i64], None)?;
        // Plain SGD on this rank's chunk.
        let g = std::mem::replace(chain.grads.get_mut(&stage).unwrap(), [0.0; WIDTH]);
        let w = chain.weights.get_mut(&stage).unwrap();
        for i in 0..WIDTH {
            w[i] -= 0.5 * g[i];
        }
        // Only the last stage knows the loss: sum it over the pipeline so every rank has it.
        let loss = Tensor::from_slice(&[1], &[chain.loss])?;
        groups.all_reduce(sys::PTDP_GROUP_PIPELINE, &loss, sys::PTDP_REDUCE_SUM)?;
        last = loss.to_vec::<f32>()?[0];
        if step == 0 {
            first = last;
        }
        if rank == 0 && step % 10 == 0 {
            println!("step {step:2}  loss {last:.6}");
        }
    }
    if rank == 0 {
        println!("loss {first:.6} -> {last:.6} over {p} stage(s), {m} microbatches per step");
    }
    if last > 0.05 * first {
        eprintln!("rank {rank}: the loss did not fall enough");
        std::process::exit(1);
    }
    Ok(())
}
