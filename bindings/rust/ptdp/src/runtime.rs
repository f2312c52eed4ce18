//! The runtime (the world of processes) and the process groups of a (t, p, d) layout.
use crate::error::{check, Result};
use crate::options::{ParallelOptions, RuntimeOptions};
use crate::sys;
use crate::tensor::Tensor;
use std::marker::PhantomData;
use std::ptr;

/// The world of processes: MPI's world (the default), or one process with `use_mpi = 0`.
pub struct Runtime {
    raw: sys::ptdp_runtime,
}

impl Runtime {
    /// Creates the runtime; collective over the world when MPI is used.
    pub fn new(options: &RuntimeOptions) -> Result<Runtime> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_runtime_create(options, &mut raw) })?;
        Ok(Runtime { raw })
    }

    /// (rank, size) of this process in the world.
    pub fn world(&self) -> Result<(i32, i32)> {
        let (mut rank, mut size) = (0, 0);
        check(unsafe { sys::ptdp_runtime_world(self.raw, &mut rank, &mut size) })?;
        Ok((rank, size))
    }

    /// (local rank, local size) among the processes of this node.
    pub fn local(&self) -> Result<(i32, i32)> {
        let (mut rank, mut size) = (0, 0);
        check(unsafe { sys::ptdp_runtime_local(self.raw, &mut rank, &mut size) })?;
        Ok((rank, size))
    }

    /// OpenMP threads of this process's CPU engine (OpenBLAS and ptdp's kernels), as chosen
    /// from `RuntimeOptions::cpu_threads` (0: OMP_NUM_THREADS, else this rank's share of the
    /// node's CPUs).
    pub fn cpu_threads(&self) -> Result<i32> {
        let mut threads = 0;
        check(unsafe { sys::ptdp_runtime_cpu_threads(self.raw, &mut threads) })?;
        Ok(threads)
    }

    pub fn as_raw(&self) -> sys::ptdp_runtime {
        self.raw
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        unsafe { sys::ptdp_runtime_destroy(self.raw) };
    }
}

/// The tensor, pipeline, data, model and embedding groups of this rank.
pub struct Groups<'rt> {
    raw: sys::ptdp_groups,
    _runtime: PhantomData<&'rt Runtime>,
}

impl<'rt> Groups<'rt> {
    /// Splits the runtime's world into groups; collective over the world.
    pub fn new(runtime: &'rt Runtime, options: &ParallelOptions) -> Result<Groups<'rt>> {
        let mut raw = ptr::null_mut();
        check(unsafe { sys::ptdp_groups_create(runtime.raw, options, &mut raw) })?;
        Ok(Groups {
            raw,
            _runtime: PhantomData,
        })
    }

    /// This rank's index in a group (`sys::PTDP_GROUP_*`).
    pub fn rank(&self, kind: sys::ptdp_group_kind) -> Result<i32> {
        let mut rank = 0;
        check(unsafe { sys::ptdp_groups_rank(self.raw, kind, &mut rank) })?;
        Ok(rank)
    }

    /// The number of ranks in a group.
    pub fn size(&self, kind: sys::ptdp_group_kind) -> Result<i32> {
        let mut size = 0;
        check(unsafe { sys::ptdp_groups_size(self.raw, kind, &mut size) })?;
        Ok(size)
    }

    /// The world ranks of a group, in group-rank order.
    pub fn members(&self, kind: sys::ptdp_group_kind) -> Result<Vec<i32>> {
        let mut ranks = vec![0; self.size(kind)?.max(0) as usize];
        let mut count = 0;
        check(unsafe { sys::ptdp_groups_members(self.raw, kind, ranks.as_mut_ptr(), ranks.len() as i32, &mut count) })?;
        ranks.truncate(count.max(0) as usize);
        Ok(ranks)
    }

    /// All-reduces a tensor in place over a group and waits for it.
    pub fn all_reduce(&self, kind: sys::ptdp_group_kind, tensor: &Tensor, op: sys::ptdp_reduce_op) -> Result<()> {
        self.wait(|work| unsafe { sys::ptdp_all_reduce(self.raw, kind, tensor.as_raw(), op, work) })
    }

    /// Broadcasts a tensor from the group rank `root` and waits for it.
    pub fn broadcast(&self, kind: sys::ptdp_group_kind, tensor: &Tensor, root: i32) -> Result<()> {
        self.wait(|work| unsafe { sys::ptdp_broadcast(self.raw, kind, tensor.as_raw(), root, work) })
    }

    /// Waits until every rank of the group has reached the barrier.
    pub fn barrier(&self, kind: sys::ptdp_group_kind) -> Result<()> {
        self.wait(|work| unsafe { sys::ptdp_barrier(self.raw, kind, work) })
    }

    /// Starts an operation, waits for it and frees its work handle.
    fn wait(&self, start: impl FnOnce(*mut sys::ptdp_work) -> sys::ptdp_status) -> Result<()> {
        let mut work = ptr::null_mut();
        check(start(&mut work))?;
        let waited = check(unsafe { sys::ptdp_work_wait(work) });
        unsafe { sys::ptdp_work_destroy(work) };
        waited
    }

    pub fn as_raw(&self) -> sys::ptdp_groups {
        self.raw
    }
}

impl Drop for Groups<'_> {
    fn drop(&mut self) {
        unsafe { sys::ptdp_groups_destroy(self.raw) };
    }
}
