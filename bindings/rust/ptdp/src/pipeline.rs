//! A user's model chunks driven by the library's pipeline scheduler (`ptdp_pipeline_run`).
//!
//! The library calls C function pointers with a `user_data` pointer; here `user_data` points at
//! a context holding the caller's [`Stages`], and generic `extern "C"` trampolines turn each
//! call into a trait method call. Errors and panics never cross the C boundary: they become a
//! status, and the first one is kept to be reported with the library's message.
use crate::error::{check, Error, Result};
use crate::model::Schedule;
use crate::options::{opt_ptr, Defaults, PipelineOptions};
use crate::runtime::Groups;
use crate::sys;
use crate::tensor::Tensor;
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The model chunks of this pipeline rank. Chunk `c` of `p * v` runs on pipeline rank `c % p`;
/// tensors passed between chunks are f32 with the activation shape given to [`pipeline_run`].
pub trait Stages {
    /// Forward of (chunk, microbatch). `input` is the previous chunk's output (None for chunk 0,
    /// which reads its own data); return the output (None is allowed for the last chunk).
    fn forward(&mut self, chunk: i32, microbatch: i32, input: Option<&Tensor>) -> Result<Option<Tensor>>;

    /// Input gradient of (chunk, microbatch). `grad_output` is None for the last chunk, which
    /// starts from its own loss; return the gradient of the input (None for chunk 0).
    fn backward_input(&mut self, chunk: i32, microbatch: i32, grad_output: Option<&Tensor>) -> Result<Option<Tensor>>;

    /// Weight gradients of (chunk, microbatch), called after its input gradient.
    fn backward_weight(&mut self, _chunk: i32, _microbatch: i32) -> Result<()> {
        Ok(())
    }

    /// False when `backward_input` also computes the weight gradients: then the library gets no
    /// weight callback and refuses schedules with separate weight-gradient actions (ZB-H1).
    fn splits_backward(&self) -> bool {
        true
    }
}

struct Context<'a, S: Stages> {
    stages: &'a mut S,
    error: Option<Error>,
}

impl<S: Stages> Context<'_, S> {
    /// Runs one callback: its tensor (if any) goes to `out`, its error or panic becomes a status.
    fn call(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut S) -> Result<Option<Tensor>>,
        out: *mut sys::ptdp_tensor,
    ) -> sys::ptdp_status {
        let result = catch_unwind(AssertUnwindSafe(|| f(self.stages)));
        let error = match result {
            Ok(Ok(tensor)) => {
                if !out.is_null() {
                    // SAFETY: `out` is the library's output slot for this call.
                    unsafe { *out = tensor.map_or(std::ptr::null_mut(), Tensor::into_raw) };
                }
                return sys::PTDP_SUCCESS;
            }
            Ok(Err(error)) => error,
            Err(_) => Error::new(sys::PTDP_ERR_INTERNAL, format!("the {what} callback panicked")),
        };
        let status = if error.status() == sys::PTDP_SUCCESS {
            sys::PTDP_ERR_INTERNAL
        } else {
            error.status()
        };
        self.error.get_or_insert(error);
        status
    }
}

/// A borrowed view of a handle the library owns: never destroyed here.
fn borrowed(raw: sys::ptdp_tensor) -> Option<ManuallyDrop<Tensor>> {
    // SAFETY: the library keeps the tensor alive for the call; ManuallyDrop never frees it.
    (!raw.is_null()).then(|| ManuallyDrop::new(unsafe { Tensor::from_raw(raw) }))
}

unsafe extern "C" fn forward<S: Stages>(
    user_data: *mut c_void,
    chunk: i32,
    microbatch: i32,
    input: sys::ptdp_tensor,
    output: *mut sys::ptdp_tensor,
) -> sys::ptdp_status {
    let context = &mut *(user_data as *mut Context<S>);
    let input = borrowed(input);
    context.call("forward", |s| s.forward(chunk, microbatch, input.as_deref()), output)
}

unsafe extern "C" fn backward_input<S: Stages>(
    user_data: *mut c_void,
    chunk: i32,
    microbatch: i32,
    grad_output: sys::ptdp_tensor,
    grad_input: *mut sys::ptdp_tensor,
) -> sys::ptdp_status {
    let context = &mut *(user_data as *mut Context<S>);
    let grad_output = borrowed(grad_output);
    context.call(
        "backward_input",
        |s| s.backward_input(chunk, microbatch, grad_output.as_deref()),
        grad_input,
    )
}

unsafe extern "C" fn backward_weight<S: Stages>(
    user_data: *mut c_void,
    chunk: i32,
    microbatch: i32,
) -> sys::ptdp_status {
    let context = &mut *(user_data as *mut Context<S>);
    context.call(
        "backward_weight",
        |s| s.backward_weight(chunk, microbatch).map(|()| None),
        std::ptr::null_mut(),
    )
}

/// Runs this rank's actions of `schedule` on `stages`: the library calls the chunks in schedule
/// order and moves activations and gradients between pipeline ranks. Collective over the
/// pipeline group. When a callback fails, the error carries the library's message followed by
/// the callback's own.
pub fn pipeline_run<S: Stages>(
    groups: &Groups,
    schedule: &Schedule,
    stages: &mut S,
    activation_shape: &[i64],
    options: Option<&PipelineOptions>,
) -> Result<()> {
    let mut callbacks = sys::ptdp_stage_callbacks::defaults();
    if activation_shape.len() > callbacks.activation_shape.len() {
        return Err(Error::invalid(format!(
            "activation shape has {} dimensions",
            activation_shape.len()
        )));
    }
    let splits = stages.splits_backward();
    let mut context = Context { stages, error: None };
    callbacks.forward = Some(forward::<S>);
    callbacks.backward_input = Some(backward_input::<S>);
    callbacks.backward_weight = if splits { Some(backward_weight::<S>) } else { None };
    callbacks.user_data = &mut context as *mut Context<S> as *mut c_void;
    callbacks.activation_ndim = activation_shape.len() as i32;
    callbacks.activation_shape[..activation_shape.len()].copy_from_slice(activation_shape);
    let result =
        check(unsafe { sys::ptdp_pipeline_run(groups.as_raw(), schedule.as_raw(), &callbacks, opt_ptr(options)) });
    match (result, context.error) {
        (Err(error), Some(cause)) => Err(Error::new(
            error.status(),
            format!("{} (callback: {})", error.message(), cause.message()),
        )),
        (result, _) => result,
    }
}

impl Defaults for sys::ptdp_stage_callbacks {
    fn defaults() -> Self {
        let mut value = std::mem::MaybeUninit::<sys::ptdp_stage_callbacks>::zeroed();
        // SAFETY: all-zero is valid (None callbacks, NULL user data); init only fails on NULL.
        unsafe {
            sys::ptdp_stage_callbacks_init(value.as_mut_ptr());
            value.assume_init()
        }
    }
}
