//! The training loop every front end shares: `ptdp-train` whole ([`train_main`]) and a
//! training run with a per-iteration callback and a cooperative stop ([`Trainer`]).
use crate::config::TrainConfig;
use crate::error::{c_string, check, Result};
use crate::options::Defaults;
use crate::runtime::Runtime;
use crate::sys;
use std::ffi::CString;
use std::os::raw::c_void;
use std::ptr;

/// What one iteration of the loop reports: loss, learning rate, grad norm, loss scale,
/// tokens/s, the paper's FLOPs, TFLOP/s per device and MFU, validation and saves.
pub type IterationReport = sys::ptdp_iteration_report;
/// `ptdp_trainer_options`, filled by `ptdp_trainer_options_init()`.
pub type TrainerOptions = sys::ptdp_trainer_options;
/// `ptdp_moe_metrics`: an iteration's MoE losses as Megatron logs them (NaN when not configured)
/// and its number of MoE layers.
pub type MoeMetrics = sys::ptdp_moe_metrics;
/// `ptdp_moe_layer_load`: one MoE layer's fewest and most tokens per expert over the global batch.
pub type MoeLayerLoad = sys::ptdp_moe_layer_load;

/// The figures and every layer's load from `call` (`ptdp_model_moe_metrics` or
/// `ptdp_trainer_moe_metrics` on a handle): once for the count, once for the loads.
pub(crate) fn moe_metrics_of(
    call: impl Fn(*mut MoeMetrics, *mut MoeLayerLoad, i64) -> sys::ptdp_status,
) -> Result<(MoeMetrics, Vec<MoeLayerLoad>)> {
    // SAFETY: all-zero is a valid value; struct_size tells the library how much to write.
    let mut metrics: MoeMetrics = unsafe { std::mem::zeroed() };
    metrics.struct_size = std::mem::size_of::<MoeMetrics>();
    check(call(&mut metrics, ptr::null_mut(), 0))?;
    let mut loads = vec![
        MoeLayerLoad {
            layer: 0,
            min_tokens: 0,
            max_tokens: 0
        };
        metrics.moe_layers as usize
    ];
    check(call(&mut metrics, loads.as_mut_ptr(), loads.len() as i64))?;
    Ok((metrics, loads))
}

impl Defaults for TrainerOptions {
    fn defaults() -> Self {
        // SAFETY: all-zero is a valid value (NULL runtime, no callback); init fills the rest.
        let mut value: TrainerOptions = unsafe { std::mem::zeroed() };
        let status = unsafe { sys::ptdp_trainer_options_init(&mut value) };
        debug_assert_eq!(status, sys::PTDP_SUCCESS);
        value
    }
}

/// Runs `ptdp-train` with `args` (`args[0]` is the program name, then its flags) through the
/// library's loop: the same log lines and checkpoints as the C tool. Returns the exit status
/// (0 done, 1 failed with the message on stderr, 2 bad flags).
pub fn train_main<S: AsRef<str>>(args: &[S]) -> Result<i32> {
    let owned = args
        .iter()
        .map(|a| c_string("argument", a.as_ref()))
        .collect::<Result<Vec<CString>>>()?;
    let argv: Vec<*const std::os::raw::c_char> = owned.iter().map(|a| a.as_ptr()).collect();
    let mut exit_code = 1;
    check(unsafe { sys::ptdp_train_main(argv.len() as i32, argv.as_ptr(), &mut exit_code) })?;
    Ok(exit_code)
}

type Callback<'a> = Box<dyn FnMut(&IterationReport) -> bool + 'a>;

/// A training run. The callback, when given, is called on every rank after each iteration;
/// returning `true` stops the run (the ranks agree; with `--save` a checkpoint is written).
pub struct Trainer<'a> {
    raw: sys::ptdp_trainer,
    // Boxed twice so the C side holds a thin pointer that stays put while the trainer moves.
    _callback: Option<Box<Callback<'a>>>,
    _runtime: Option<&'a Runtime>,
}

unsafe extern "C" fn on_iteration(report: *const IterationReport, user_data: *mut c_void) -> i32 {
    // SAFETY: user_data is the Box<Callback> the trainer owns; report is valid for the call.
    let callback = &mut *(user_data as *mut Callback);
    // A panic must not unwind into C: it stops the run, as a `true` would.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| callback(&*report))) {
        Ok(stop) => stop as i32,
        Err(_) => 1,
    }
}

impl<'a> Trainer<'a> {
    /// Builds the run of `config` on `runtime` (None: the library's own over MPI_COMM_WORLD).
    pub fn new(
        config: &TrainConfig,
        runtime: Option<&'a Runtime>,
        print: bool,
        callback: Option<Callback<'a>>,
    ) -> Result<Trainer<'a>> {
        let mut options = TrainerOptions::defaults();
        options.runtime = runtime.map_or(ptr::null_mut(), |r| r.as_raw());
        options.print_log = print as i32;
        let mut boxed = callback.map(Box::new);
        if let Some(b) = boxed.as_mut() {
            options.on_iteration = Some(on_iteration);
            options.user_data = (&mut **b) as *mut Callback as *mut c_void;
        }
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_trainer_create(config.as_raw(), &options, &mut raw) })?;
        Ok(Trainer { raw, _callback: boxed, _runtime: runtime })
    }

    /// Trains to `--train-iters`, or until `--exit-interval` or a stop.
    pub fn run(&mut self) -> Result<IterationReport> {
        check(unsafe { sys::ptdp_trainer_run(self.raw) })?;
        self.last_report()
    }

    /// Asks the run to stop after the iteration in progress.
    pub fn request_stop(&self) -> Result<()> {
        check(unsafe { sys::ptdp_trainer_request_stop(self.raw) })
    }

    /// The last iteration's report.
    pub fn last_report(&self) -> Result<IterationReport> {
        // SAFETY: all-zero is a valid value; struct_size tells the library how much to write.
        let mut report: IterationReport = unsafe { std::mem::zeroed() };
        report.struct_size = std::mem::size_of::<IterationReport>();
        check(unsafe { sys::ptdp_trainer_last_report(self.raw, &mut report) })?;
        Ok(report)
    }

    /// The MoE figures of the last iteration (in the callback: of the iteration it is called
    /// for) and every MoE layer's expert load; no layers for a dense model.
    pub fn moe_metrics(&self) -> Result<(MoeMetrics, Vec<MoeLayerLoad>)> {
        moe_metrics_of(|m, loads, capacity| unsafe { sys::ptdp_trainer_moe_metrics(self.raw, m, loads, capacity) })
    }
}

impl Drop for Trainer<'_> {
    fn drop(&mut self) {
        unsafe { sys::ptdp_trainer_destroy(self.raw) };
    }
}
