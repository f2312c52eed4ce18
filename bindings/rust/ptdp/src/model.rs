//! The GPT model, its optimizer, pipeline schedules and checkpoints.
use crate::config::TrainConfig;
use crate::error::{c_string, check, from_buffer, Error, Result};
use crate::masks::BatchMasks;
use crate::options::{Action, CheckpointState, Defaults, GenerateOptions, GptOptions, IterationResult};
use crate::options::{OptimizerOptions, PipelineOptions, ScheduleCosts};
use crate::runtime::Groups;
use crate::sys;
use std::marker::PhantomData;
use std::ptr;

/// A parameter of the model: its name, global shape and the dimension split over the tensor
/// group (-1: replicated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamInfo {
    pub name: String,
    pub global_shape: Vec<i64>,
    pub partition_dim: i32,
}

/// A GPT model: this rank's chunks of it under the groups' (t, p, v) layout.
pub struct Model<'g> {
    raw: sys::ptdp_model,
    _groups: PhantomData<&'g Groups<'g>>,
}

impl<'g> Model<'g> {
    /// Builds the model and initialises its weights; collective over the world of the groups.
    pub fn new(groups: &'g Groups<'_>, options: &GptOptions) -> Result<Model<'g>> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_model_create(groups.as_raw(), options, &mut raw) })?;
        Ok(Model {
            raw,
            _groups: PhantomData,
        })
    }

    /// The options the model was built with, its defaults resolved (`rotary_base` 10000 rather
    /// than 0, and so on).
    pub fn options(&self) -> Result<GptOptions> {
        let mut options = GptOptions::defaults();
        check(unsafe { sys::ptdp_model_get_options(self.raw, &mut options) })?;
        Ok(options)
    }

    /// Forward and backward of one microbatch (no pipeline split); returns its mean loss.
    pub fn forward_backward(
        &self,
        tokens: &[i32],
        labels: &[i32],
        micro_batch_size: i32,
        iteration: i64,
        microbatch: i64,
        grad_scale: f32,
    ) -> Result<f32> {
        self.forward_backward_masked(
            tokens,
            labels,
            &BatchMasks::default(),
            micro_batch_size,
            iteration,
            microbatch,
            grad_scale,
        )
    }

    /// [`Model::forward_backward`] with position ids and documents; labels may be
    /// [`crate::IGNORE_INDEX`]. Returns the masked mean loss.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_backward_masked(
        &self,
        tokens: &[i32],
        labels: &[i32],
        masks: &BatchMasks,
        micro_batch_size: i32,
        iteration: i64,
        microbatch: i64,
        grad_scale: f32,
    ) -> Result<f32> {
        same_len(tokens, labels)?;
        let masks = masks.to_raw(tokens.len())?;
        let mut loss = 0.0;
        check(unsafe {
            sys::ptdp_model_forward_backward(
                self.raw,
                tokens.as_ptr(),
                labels.as_ptr(),
                micro_batch_size,
                iteration,
                microbatch,
                grad_scale,
                &with_masks(None, &masks),
                &mut loss,
            )
        })?;
        Ok(loss)
    }

    /// Forward of one microbatch; `training` turns dropout on.
    pub fn forward(
        &self,
        tokens: &[i32],
        labels: &[i32],
        micro_batch_size: i32,
        iteration: i64,
        microbatch: i64,
        training: bool,
    ) -> Result<f32> {
        self.forward_masked(
            tokens,
            labels,
            &BatchMasks::default(),
            micro_batch_size,
            iteration,
            microbatch,
            training,
        )
    }

    /// [`Model::forward`] with position ids and documents; returns the masked mean loss.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_masked(
        &self,
        tokens: &[i32],
        labels: &[i32],
        masks: &BatchMasks,
        micro_batch_size: i32,
        iteration: i64,
        microbatch: i64,
        training: bool,
    ) -> Result<f32> {
        same_len(tokens, labels)?;
        let masks = masks.to_raw(tokens.len())?;
        let mut loss = 0.0;
        check(unsafe {
            sys::ptdp_model_forward(
                self.raw,
                tokens.as_ptr(),
                labels.as_ptr(),
                micro_batch_size,
                iteration,
                microbatch,
                training as i32,
                &with_masks(None, &masks),
                &mut loss,
            )
        })?;
        Ok(loss)
    }

    /// Forward and backward of a global batch through a pipeline schedule (no optimizer step);
    /// returns the mean loss. Gradients accumulate: call `zero_grad` between steps.
    pub fn pipeline_forward_backward(
        &self,
        schedule: &Schedule,
        tokens: &[i32],
        labels: &[i32],
        micro_batch_size: i32,
        iteration: i64,
        options: Option<&PipelineOptions>,
    ) -> Result<f32> {
        self.pipeline_forward_backward_masked(
            schedule,
            tokens,
            labels,
            &BatchMasks::default(),
            micro_batch_size,
            iteration,
            options,
        )
    }

    /// [`Model::pipeline_forward_backward`] with position ids and documents for the whole batch
    /// (they replace `options`' masks).
    #[allow(clippy::too_many_arguments)]
    pub fn pipeline_forward_backward_masked(
        &self,
        schedule: &Schedule,
        tokens: &[i32],
        labels: &[i32],
        masks: &BatchMasks,
        micro_batch_size: i32,
        iteration: i64,
        options: Option<&PipelineOptions>,
    ) -> Result<f32> {
        same_len(tokens, labels)?;
        let masks = masks.to_raw(tokens.len())?;
        let mut loss = 0.0;
        check(unsafe {
            sys::ptdp_model_pipeline_forward_backward(
                self.raw,
                schedule.raw,
                tokens.as_ptr(),
                labels.as_ptr(),
                micro_batch_size,
                iteration,
                &with_masks(options, &masks),
                &mut loss,
            )
        })?;
        Ok(loss)
    }

    /// The old name of `pipeline_forward_backward`.
    #[deprecated(since = "0.2.0", note = "use pipeline_forward_backward")]
    pub fn train_step(
        &self,
        schedule: &Schedule,
        tokens: &[i32],
        labels: &[i32],
        micro_batch_size: i32,
        iteration: i64,
        options: Option<&PipelineOptions>,
    ) -> Result<f32> {
        self.pipeline_forward_backward(schedule, tokens, labels, micro_batch_size, iteration, options)
    }

    /// Mean loss of `num_microbatches` microbatches without dropout or gradients.
    pub fn evaluate(
        &self,
        tokens: &[i32],
        labels: &[i32],
        micro_batch_size: i32,
        num_microbatches: i32,
    ) -> Result<f32> {
        self.evaluate_masked(
            tokens,
            labels,
            &BatchMasks::default(),
            micro_batch_size,
            num_microbatches,
        )
    }

    /// [`Model::evaluate`] with position ids and documents.
    pub fn evaluate_masked(
        &self,
        tokens: &[i32],
        labels: &[i32],
        masks: &BatchMasks,
        micro_batch_size: i32,
        num_microbatches: i32,
    ) -> Result<f32> {
        same_len(tokens, labels)?;
        let masks = masks.to_raw(tokens.len())?;
        let mut loss = 0.0;
        check(unsafe {
            sys::ptdp_model_evaluate(
                self.raw,
                tokens.as_ptr(),
                labels.as_ptr(),
                micro_batch_size,
                num_microbatches,
                &with_masks(None, &masks),
                &mut loss,
            )
        })?;
        Ok(loss)
    }

    /// Up to `options.max_new_tokens` tokens sampled after `prompt` (the new tokens only).
    pub fn generate(&self, prompt: &[i32], options: &GenerateOptions) -> Result<Vec<i32>> {
        let mut out = vec![0; options.max_new_tokens.max(0) as usize];
        let mut count = 0;
        check(unsafe {
            sys::ptdp_model_generate(
                self.raw,
                prompt.as_ptr(),
                prompt.len() as i32,
                options,
                out.as_mut_ptr(),
                out.len() as i32,
                &mut count,
            )
        })?;
        out.truncate(count.max(0) as usize);
        Ok(out)
    }

    pub fn zero_grad(&self) -> Result<()> {
        check(unsafe { sys::ptdp_model_zero_grad(self.raw) })
    }

    pub fn num_params(&self) -> Result<i32> {
        let mut count = 0;
        check(unsafe { sys::ptdp_model_num_params(self.raw, &mut count) })?;
        Ok(count)
    }

    pub fn param_info(&self, index: i32) -> Result<ParamInfo> {
        let mut name = [0u8; 256];
        let mut shape = [0i64; sys::PTDP_MAX_DIMS as usize];
        let (mut ndim, mut partition_dim) = (0, 0);
        check(unsafe {
            sys::ptdp_model_param_info(
                self.raw,
                index,
                name.as_mut_ptr().cast(),
                name.len(),
                &mut ndim,
                shape.as_mut_ptr(),
                &mut partition_dim,
            )
        })?;
        Ok(ParamInfo {
            name: from_buffer(&name),
            global_shape: shape[..ndim as usize].to_vec(),
            partition_dim,
        })
    }

    /// The full global-shape value of a parameter; collective over the model-parallel group.
    pub fn get_param(&self, info: &ParamInfo) -> Result<Vec<f32>> {
        let name = c_string("parameter name", &info.name)?;
        let mut host = vec![0f32; info.global_shape.iter().product::<i64>() as usize];
        check(unsafe {
            sys::ptdp_model_get_param(
                self.raw,
                name.as_ptr(),
                host.as_mut_ptr(),
                std::mem::size_of_val(&host[..]),
            )
        })?;
        Ok(host)
    }

    /// Sets a parameter from its full global-shape value (the same on every rank).
    pub fn set_param(&self, name: &str, value: &[f32]) -> Result<()> {
        let name = c_string("parameter name", name)?;
        check(unsafe {
            sys::ptdp_model_set_param(self.raw, name.as_ptr(), value.as_ptr(), std::mem::size_of_val(value))
        })
    }

    /// The MoE figures of the last [`Optimizer::train_iteration`] and every MoE layer's expert
    /// load (no layers before it and for a dense model).
    pub fn moe_metrics(&self) -> Result<(crate::MoeMetrics, Vec<crate::MoeLayerLoad>)> {
        crate::trainer::moe_metrics_of(|m, loads, capacity| unsafe {
            sys::ptdp_model_moe_metrics(self.raw, m, loads, capacity)
        })
    }

    pub fn as_raw(&self) -> sys::ptdp_model {
        self.raw
    }
}

impl Drop for Model<'_> {
    fn drop(&mut self) {
        unsafe { sys::ptdp_model_destroy(self.raw) };
    }
}

/// `options` (None: the defaults) carrying `masks`, which must outlive the call it is passed to.
fn with_masks(options: Option<&PipelineOptions>, masks: &sys::ptdp_batch_masks) -> PipelineOptions {
    let mut o = options.copied().unwrap_or_else(PipelineOptions::defaults);
    o.masks = masks;
    o
}

fn same_len(tokens: &[i32], labels: &[i32]) -> Result<()> {
    if tokens.len() != labels.len() {
        return Err(Error::invalid(format!(
            "{} tokens but {} labels",
            tokens.len(),
            labels.len()
        )));
    }
    Ok(())
}

/// The optimizer of a model: Adam(W) or SGD, LR schedule, loss scaling, clipping, and the
/// data-parallel gradient reduction.
pub struct Optimizer<'m> {
    raw: sys::ptdp_optimizer,
    model: &'m Model<'m>,
}

impl<'m> Optimizer<'m> {
    pub fn new(model: &'m Model<'m>, options: &OptimizerOptions) -> Result<Optimizer<'m>> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_optimizer_create(model.raw, options, &mut raw) })?;
        Ok(Optimizer { raw, model })
    }

    /// One training iteration: zero the gradients, run the batch through `schedule`, step.
    pub fn train_iteration(
        &self,
        schedule: &Schedule,
        tokens: &[i32],
        labels: &[i32],
        micro_batch_size: i32,
        iteration: i64,
        options: Option<&PipelineOptions>,
    ) -> Result<IterationResult> {
        self.train_iteration_masked(
            schedule,
            tokens,
            labels,
            &BatchMasks::default(),
            micro_batch_size,
            iteration,
            options,
        )
    }

    /// [`Optimizer::train_iteration`] with position ids and documents (they replace `options`'
    /// masks); labels may be [`crate::IGNORE_INDEX`].
    #[allow(clippy::too_many_arguments)]
    pub fn train_iteration_masked(
        &self,
        schedule: &Schedule,
        tokens: &[i32],
        labels: &[i32],
        masks: &BatchMasks,
        micro_batch_size: i32,
        iteration: i64,
        options: Option<&PipelineOptions>,
    ) -> Result<IterationResult> {
        same_len(tokens, labels)?;
        let masks = masks.to_raw(tokens.len())?;
        let mut result = zeroed_result();
        check(unsafe {
            sys::ptdp_train_iteration(
                self.model.raw,
                self.raw,
                schedule.raw,
                tokens.as_ptr(),
                labels.as_ptr(),
                micro_batch_size,
                iteration,
                &with_masks(options, &masks),
                &mut result,
            )
        })?;
        Ok(result)
    }

    /// Reduces the gradients over the data-parallel group (after a manual backward).
    pub fn reduce_gradients(&self) -> Result<()> {
        check(unsafe { sys::ptdp_optimizer_reduce_gradients(self.raw) })
    }

    /// Updates the weights from the current gradients.
    pub fn step(&self, iteration: i64) -> Result<IterationResult> {
        let mut result = zeroed_result();
        check(unsafe { sys::ptdp_optimizer_step(self.raw, iteration, &mut result) })?;
        Ok(result)
    }

    /// Bytes of optimizer state held by this rank.
    pub fn state_bytes(&self) -> Result<usize> {
        let mut bytes = 0;
        check(unsafe { sys::ptdp_optimizer_state_bytes(self.raw, &mut bytes) })?;
        Ok(bytes)
    }

    pub fn as_raw(&self) -> sys::ptdp_optimizer {
        self.raw
    }
}

impl Drop for Optimizer<'_> {
    fn drop(&mut self) {
        unsafe { sys::ptdp_optimizer_destroy(self.raw) };
    }
}

fn zeroed_result() -> IterationResult {
    // SAFETY: a plain C struct of numbers.
    unsafe { std::mem::zeroed() }
}

/// A pipeline schedule: a list of actions per pipeline rank.
pub struct Schedule {
    raw: sys::ptdp_schedule,
}

impl Schedule {
    /// A schedule of `kind` (`sys::PTDP_SCHEDULE_*`) for p stages, m microbatches, v chunks each.
    pub fn new(kind: sys::ptdp_schedule_kind, p: i32, m: i32, v: i32) -> Result<Schedule> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_schedule_create(kind, p, m, v, &mut raw) })?;
        Ok(Schedule { raw })
    }

    /// (kind, p, m, v).
    pub fn info(&self) -> Result<(sys::ptdp_schedule_kind, i32, i32, i32)> {
        let (mut kind, mut p, mut m, mut v) = (0, 0, 0, 0);
        check(unsafe { sys::ptdp_schedule_info(self.raw, &mut kind, &mut p, &mut m, &mut v) })?;
        Ok((kind, p, m, v))
    }

    /// The actions of one pipeline rank, in order.
    pub fn actions(&self, rank: i32) -> Result<Vec<Action>> {
        let mut count = 0;
        check(unsafe { sys::ptdp_schedule_num_actions(self.raw, rank, &mut count) })?;
        let empty = Action {
            kind: 0,
            microbatch: 0,
            chunk: 0,
            peer: 0,
        };
        let mut actions = vec![empty; count.max(0) as usize];
        check(unsafe {
            sys::ptdp_schedule_actions(self.raw, rank, actions.as_mut_ptr(), actions.len() as i32, &mut count)
        })?;
        actions.truncate(count.max(0) as usize);
        Ok(actions)
    }

    /// Checks dependencies and matched transfers: Ok(None) when sound, else the problem.
    pub fn check(&self) -> Result<Option<String>> {
        let mut ok = 0;
        let mut message = [0u8; 1024];
        check(unsafe { sys::ptdp_schedule_check(self.raw, &mut ok, message.as_mut_ptr().cast(), message.len()) })?;
        Ok(if ok != 0 { None } else { Some(from_buffer(&message)) })
    }

    /// (makespan, bubble fraction) of the schedule under `costs`.
    pub fn simulate(&self, costs: &ScheduleCosts) -> Result<(f64, f64)> {
        let (mut makespan, mut bubble) = (0.0, 0.0);
        check(unsafe { sys::ptdp_schedule_simulate(self.raw, costs, &mut makespan, &mut bubble, ptr::null_mut(), 0) })?;
        Ok((makespan, bubble))
    }

    pub fn as_raw(&self) -> sys::ptdp_schedule {
        self.raw
    }
}

impl Drop for Schedule {
    fn drop(&mut self) {
        unsafe { sys::ptdp_schedule_destroy(self.raw) };
    }
}

/// Saves model, optimizer (and the configuration, if any) to `directory`; collective.
pub fn checkpoint_save(
    directory: &str,
    model: &Model,
    optimizer: &Optimizer,
    config: Option<&TrainConfig>,
    state: &CheckpointState,
) -> Result<()> {
    let dir = c_string("directory", directory)?;
    let config = config.map_or(ptr::null_mut(), |c| c.as_raw());
    check(unsafe { sys::ptdp_checkpoint_save(dir.as_ptr(), model.raw, optimizer.raw, config, state) })
}

/// Loads a checkpoint written by [`checkpoint_save`]; returns its state.
pub fn checkpoint_load(directory: &str, model: &Model, optimizer: Option<&Optimizer>) -> Result<CheckpointState> {
    let dir = c_string("directory", directory)?;
    let mut state = CheckpointState::defaults();
    let optimizer = optimizer.map_or(ptr::null_mut(), |o| o.raw);
    check(unsafe { sys::ptdp_checkpoint_load(dir.as_ptr(), model.raw, optimizer, &mut state) })?;
    Ok(state)
}
